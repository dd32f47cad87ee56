"""Exact worst cases over paper 004's TV ball, for evaluation at log time.

For a noisy group ``j`` the adversary plays ``p ∈ B_j = {p >= 0, Σ p = 1, ‖p − p̂_j‖₁ <= 2γ_j}``
over the ``n`` rows of a split (``p̂_j`` uniform over the rows of noisy group ``j``; ``p`` may put
mass on any row, as ``p ≪ p_data`` allows).

* A payoff linear in ``p``, ``v·p``, is maximised greedily: move mass ``γ_j`` from the
  lowest-value rows of ``p̂_j`` (their whole mass, in increasing order of ``v``) onto the row
  of largest ``v`` (:func:`tv_max_linear`).
* A group rate is a RATIO of weighted sums, ``u·p / w·p`` (``w >= 0``: the rate's subset,
  ``u = w·event``); its maximum over ``B_j`` is found exactly by Dinkelbach's iteration
  ``r ← u·p_r / w·p_r`` with ``p_r`` the greedy maximiser of ``(u − r w)·p``, which stops
  at the optimum after finitely many steps (the greedy maximisers are finitely many)
  (:func:`tv_extreme_ratio`). For TPR this is the closed form ``max(a − γ, 0)/(a + b)``
  (``a``, ``b`` the ``p̂_j``-mass of true positives and false negatives) whenever a false
  negative exists; the iteration also covers FPR, PPR and any event.

:func:`robust_values` applies these to constraints affine in rates, each rate reading at most
one value of the noisy attribute: ``g = c₀ + Σ c_k R_k`` is at its worst when every group's
rate is pushed in the direction of its coefficient's sign (separate adversaries per group).

Example:
    >>> import torch
    >>> center = torch.tensor([0.5, 0.5, 0.0])
    >>> float(tv_max_linear(torch.tensor([0.0, 1.0, 2.0]), center, 0.25))
    1.0
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from fairgames.rates import Constraint, Leaf
from fairgames.rates.subsets import And, Everything, GroupIs, LabelIs, Subset


def tv_argmax_linear(v: torch.Tensor, center: torch.Tensor, gamma: float) -> torch.Tensor:
    """The greedy maximiser of ``v·p`` over the TV ball ∩ simplex (see the module docstring).

    Example:
        >>> tv_argmax_linear(torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0.5, 0.5, 0.0]),
        ...                  0.25).tolist()
        [0.25, 0.5, 0.25]
    """
    v, c = v.double(), center.double()
    order = torch.argsort(v)
    mass = c[order]
    cum = torch.cumsum(mass, 0)
    take = (torch.clamp(cum, max=float(gamma)) - (cum - mass)).clamp_min(0.0)
    p = c.clone()
    p[order] -= take
    p[torch.argmax(v)] += take.sum()
    return p


def tv_max_linear(v: torch.Tensor, center: torch.Tensor, gamma: float) -> torch.Tensor:
    """``max v·p`` over ``{p >= 0, Σ p = 1, ‖p − center‖₁ <= 2γ}`` (float64 scalar)."""
    return v.double() @ tv_argmax_linear(v, center, gamma)


def tv_extreme_ratio(u: torch.Tensor, w: torch.Tensor, center: torch.Tensor, gamma: float, *,
                     maximize: bool = True, max_iter: int = 100) -> torch.Tensor:
    """``max`` (or ``min``) of ``u·p / w·p`` over the TV ball ∩ simplex, ``w >= 0`` with
    ``w·center > 0`` (Dinkelbach; distributions with ``w·p = 0`` leave the rate undefined
    and are not taken).

    Example:
        >>> u = torch.tensor([1.0, 0.0, 0.0])      # TPR: row 0 a true positive,
        >>> w = torch.tensor([1.0, 1.0, 0.0])      # row 1 a false negative, row 2 a negative
        >>> float(tv_extreme_ratio(u, w, torch.tensor([0.5, 0.5, 0.0]), 0.2, maximize=False))
        0.3
    """
    u, w, c = u.double(), w.double(), center.double()
    sign = 1.0 if maximize else -1.0
    if not float(w @ c) > 0:
        raise ValueError("the rate's subset has no mass under p̂ (an empty noisy group?)")
    r = float(u @ c) / float(w @ c)
    for _ in range(max_iter):
        # the rate is sign·r; maximise sign·u − (sign·r)·w ... written on f = sign·u
        p = tv_argmax_linear(sign * u - (sign * r) * w + _tiny_tie(w), c, gamma)
        den = float(w @ p)
        if not den > 1e-15:
            break
        new = float(u @ p) / den
        if sign * (new - r) <= 1e-15:
            break
        r = new
    return torch.tensor(r, dtype=torch.float64)


def _tiny_tie(w: torch.Tensor) -> torch.Tensor:
    """A tie-break toward rows in the subset (``w > 0``): among rows of equal payoff the
    greedy move lands where the rate is defined."""
    return 1e-12 * (w > 0).double()


def rate_vectors(leaf: Leaf, attribute: str, scores: torch.Tensor, labels: torch.Tensor,
                 groups: Mapping[str, torch.Tensor], names: Mapping[str, Sequence[str]],
                 mixture_weights: torch.Tensor | None = None
                 ) -> tuple[int | None, torch.Tensor, torch.Tensor]:
    """``(code of the noisy value the leaf reads or None, u, w)`` per row: the leaf's rate is
    ``Σ m u / Σ m w`` over the rows' memberships ``m`` of that value. ``scores`` ``[N]``, or
    ``[R, N]`` with ``mixture_weights`` ``[R]`` (a stochastic model: ``ŷ`` is then the
    probability of a positive prediction, in which every rate is linear)."""
    event = leaf.event
    if event is None or event.uses_baseline:
        raise ValueError(f"robust evaluation supports rates of the model's predictions, not "
                         f"{leaf}")
    ind = event.indicator
    s = scores.double()
    yhat = ((s > ind.threshold) if ind.strict else (s >= ind.threshold)).double()
    if mixture_weights is not None:
        yhat = mixture_weights.double() @ yhat
    y = labels.long()
    a = torch.tensor([event.a[0][0], event.a[1][0]], dtype=torch.float64)[y]
    b = torch.tensor([event.b[0][0], event.b[1][0]], dtype=torch.float64)[y]
    e = a + b * yhat
    w = torch.ones_like(yhat)
    code = None
    for lit in _literals(leaf.where):
        if isinstance(lit, LabelIs):
            w = w * (y == int(lit.value)).double()
        elif lit.attribute == attribute:
            code = _code(lit, names[attribute])
        else:
            w = w * (groups[lit.attribute] == _code(lit, names[lit.attribute])).double()
    return code, w * e, w


def _literals(where: Subset) -> list[LabelIs | GroupIs]:
    if isinstance(where, Everything):
        return []
    if isinstance(where, And):
        return _literals(where.left) + _literals(where.right)
    out = []
    for part in (where,):
        if not isinstance(part, (LabelIs, GroupIs)):
            raise ValueError(f"robust evaluation supports subsets made of labels and groups "
                             f"joined by '&', not {where}")
        out.append(part)
    return out


def _code(lit: GroupIs, names: Sequence[str]) -> int:
    if isinstance(lit.value, int) and not isinstance(lit.value, bool):
        return int(lit.value)
    return list(names).index(str(lit.value))


def sample_tv_ball(center: torch.Tensor, gamma: float, samples: int,
                   generator: torch.Generator) -> torch.Tensor:
    """``[samples, n]`` random points near the TV ball around ``center``, drawn as paper 004's
    code draws them (``generate_rand_vec_l1_ball``): a uniform point of the simplex (sorted
    uniforms' gaps) scaled to the ℓ₁ radius ``2γ``, random signs, added to ``center`` and
    clamped at 0 (``Σ p = 1`` is not restored; the rates are ratios, invariant to scale).
    The maximum of a rate over them is a lower bound on its maximum over the ball.

    Example:
        >>> c = torch.tensor([0.5, 0.5, 0.0])
        >>> p = sample_tv_ball(c, 0.1, 4, torch.Generator().manual_seed(0))
        >>> p.shape, bool((p >= 0).all()), bool(((p - c).abs().sum(1) <= 0.2 + 1e-12).all())
        (torch.Size([4, 3]), True, True)
    """
    n = center.shape[0]
    cuts = torch.rand(samples, n - 1, generator=generator, dtype=torch.float64).sort(1).values
    edges = torch.cat([torch.zeros(samples, 1, dtype=torch.float64), cuts,
                       torch.ones(samples, 1, dtype=torch.float64)], 1)
    signs = torch.randint(0, 2, (samples, n), generator=generator).double() * 2 - 1
    step = edges.diff(dim=1) * (2.0 * float(gamma)) * signs
    return (center.double() + step).clamp_min(0.0)


def robust_values(constraints: Mapping[str, Constraint], attribute: str, gamma: Sequence[float],
                  scores: torch.Tensor, labels: torch.Tensor,
                  groups: Mapping[str, torch.Tensor], names: Mapping[str, Sequence[str]],
                  mixture_weights: torch.Tensor | None = None,
                  samples: Mapping[int, torch.Tensor] | None = None) -> dict[str, float | None]:
    """The exact TV-ball maximum of each ``<=`` constraint's ``g`` on a split (``None`` for a
    constraint this evaluation does not cover: non-affine, or two rates of one noisy group on
    different subsets). ``gamma[j]`` is the TV radius of noisy group ``j``; ``scores`` and
    ``mixture_weights`` as in :func:`rate_vectors`. With ``samples`` (``{code: [K, n]}``, e.g.
    :func:`sample_tv_ball`'s), each group's worst case is the largest over those ``K``
    distributions instead (paper 004's code's lower bound).

    Example:
        >>> from fairgames.rates import group, true_positive_rate
        >>> c = (true_positive_rate(group("g", "b")) >= 0.5).named("tpr_b")
        >>> out = robust_values({"tpr_b": c}, "g", [0.0, 0.1], torch.tensor([1.0, -1, 1, 1]),
        ...                     torch.ones(4), {"g": torch.tensor([0, 0, 1, 1])},
        ...                     {"g": ["a", "b"]})
        >>> round(out["tpr_b"], 6)     # TPR_b = 1 falls to 0.9: 0.5 − 0.9
        -0.4
    """
    codes = groups[attribute]
    out: dict[str, float | None] = {}
    for name, con in constraints.items():
        expr = con.expression
        if con.sense != "<=" or not expr.is_affine:
            out[name] = None
            continue
        try:
            out[name] = _worst(expr.affine, attribute, gamma, scores, labels, groups, names,
                               mixture_weights, codes, samples)
        except ValueError:     # a rate it does not cover (baseline events, empty subsets)
            out[name] = None
    return out


def _worst(form: Any, attribute: str, gamma: Sequence[float], scores: torch.Tensor,
           labels: torch.Tensor, groups: Mapping[str, torch.Tensor],
           names: Mapping[str, Sequence[str]], mixture_weights: torch.Tensor | None,
           codes: torch.Tensor, samples: Mapping[int, torch.Tensor] | None = None
           ) -> float | None:
    """The worst case of the affine form ``c₀ + Σ c_k R_k`` (each noisy group's rates pushed
    by its own adversary)."""
    total = form.constant
    by_group: dict[int, list[tuple[float, torch.Tensor, torch.Tensor]]] = {}
    for leaf, coef in form.terms:
        code, u, w = rate_vectors(leaf, attribute, scores, labels, groups, names,
                                  mixture_weights)
        if code is None:
            if not float(w.sum()) > 0:
                raise ValueError(f"{leaf} has no row")
            total += coef * float(u.sum() / w.sum())
        else:
            by_group.setdefault(code, []).append((coef, u, w))
    for code, terms in by_group.items():
        w = terms[0][2]
        if any(not torch.equal(t[2], w) for t in terms):
            return None
        u = sum(coef * uu for coef, uu, _ in terms)
        center = (codes == code).double()
        if not float(center.sum()) > 0:
            raise ValueError("an empty noisy group")
        if samples is None:
            total += float(tv_extreme_ratio(u, w, center / center.sum(), float(gamma[code])))
        else:
            total += _sampled_max(u, w, samples[code])
    return total


def _sampled_max(u: torch.Tensor, w: torch.Tensor, points: torch.Tensor) -> float:
    """``max_k u·p_k / w·p_k`` over the rows ``p_k`` of ``points`` where the rate is defined."""
    p = points.double()
    num, den = p @ u.double(), p @ w.double()
    ok = den > 1e-15
    if not bool(ok.any()):
        raise ValueError("no sampled distribution puts mass on the rate's subset")
    return float((num[ok] / den[ok]).max())
