"""Best responses of the slack player: ``ξ* = argmin_{ξ in box} c·ψ(ξ) + ⟨μ, ξ⟩``.

Paper 000 (Section 3, Lemma 1) splits the Lagrangian of (P1) as
``L1(ξ; λ) = ψ(ξ) − Σ_k λ_k ξ_k`` plus a part that does not involve ξ, so the ξ-player's best
response is ``ξ* = argmin_ξ L1 = ∇ψ*(λ)`` (the gradient of the Fenchel conjugate), restricted to
the box the rates live in. For (P2) the ξ-part is ``λ_j φ_j(ξ) − Σ_k λ_{J+k} ξ_k``. Both are the
problem solved here, with ``coefficient`` the weight ``c`` of ψ and ``mu`` the linear term. The
caller folds the orientation of each slack constraint into ``mu``: ``R ≤ ξ`` (increasing
argument) contributes ``−λ``, ``R ≥ ξ`` (decreasing argument, e.g. ``1 − gmean``) ``+λ``, and a
two-sided pair (KLD) ``λ⁻ − λ⁺``.

Closed forms (all on the device, no host sync, batched over leading dimensions of ``mu``):

* ``geometric_mean2``, ``harmonic_mean2`` (with ``c < 0``: minimising ``−|c|·mean(u) + ⟨μ, u⟩``)
  and ``root_mean_square2`` (``c > 0``). Each ψ is positively homogeneous of degree 1, so
  ``f(t·u) = t·f(u)``: a minimiser is the origin (when ``min f = 0``) or lies on an upper face
  ``u1 = 1`` or ``u2 = 1`` of the box (scale any interior point with ``f < 0`` up to the box).
  On a face the problem is one-dimensional and convex with a closed-form stationary point; the
  best of the three candidates is the minimiser.
* ``kld`` in its second argument ``p̂`` with ``p`` fixed: the stationarity condition
  ``c(−p/q + (1−p)/(1−q)) + μ = 0`` is the quadratic ``μq² − (μ+c)q + cp = 0``, whose root in
  ``[0, 1]`` is taken in a cancellation-free form.

Any other convex ``c·ψ`` falls back to :func:`box_argmin`: projected, normalised gradient steps
with autograd and a FIXED number of steps (no data-dependent stopping, which would sync).

Constant arguments (KLD's ``p``, a label rate) are passed as ``fixed={index: value}``; ``mu``
then has one entry per *free* argument and so does the result.

Example:
    >>> import torch
    >>> from fairgames.rates import KLD, geometric_mean
    >>> xi = psi_linear_argmin(geometric_mean(2), -1.0, torch.tensor([0.1, 2.0]))
    >>> [round(float(v), 4) for v in xi]      # u1 = 1, u2 = (1 / (2·2))² on the face u1 = 1
    [1.0, 0.0625]
    >>> q = psi_linear_argmin(KLD, 1.0, torch.tensor([0.0]), fixed={0: torch.tensor(0.3)})
    >>> round(float(q[0]), 4)                  # no linear pull: p̂ = p
    0.3
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from fairgames.rates import Psi

Box = tuple[tuple[float, float], ...]
# fn(coefficient [...], mu [..., n_free], fixed {index: [...]}) -> xi [..., n_free]
ClosedFormFn = Callable[[torch.Tensor, torch.Tensor, Mapping[int, torch.Tensor]], torch.Tensor]


@dataclass(frozen=True)
class ClosedForm:
    """A registered closed-form best response for the ψ named ``name``.

    ``free`` are the argument positions it solves for (the others must be given as ``fixed``)
    and ``domain`` is the full box it assumes; a ψ with another domain uses the generic solver.
    """

    name: str
    fn: ClosedFormFn
    free: tuple[int, ...]
    domain: Box


CLOSED_FORMS: dict[str, ClosedForm] = {}
"""Registry ``psi.name → ClosedForm`` (the name-keyed stand-in for ``Psi.conjugate_argmax``)."""


def register_closed_form(name: str, fn: ClosedFormFn, *, free: tuple[int, ...],
                         domain: Box) -> None:
    """Register ``fn`` as the closed-form best response of the ψ named ``name``."""
    CLOSED_FORMS[name] = ClosedForm(name, fn, tuple(free), tuple(tuple(b) for b in domain))


def closed_form(psi: Psi, free: tuple[int, ...] | None = None) -> ClosedForm | None:
    """The registered closed form for ``psi`` solving for ``free`` arguments, if any."""
    entry = CLOSED_FORMS.get(psi.name)
    free = tuple(range(psi.arity)) if free is None else tuple(free)
    if entry is None or entry.free != free:
        return None
    if tuple(tuple(float(v) for v in b) for b in psi.domain) != entry.domain:
        return None
    return entry


# --------------------------------------------------------------------------- the dispatcher
def psi_linear_argmin(psi: Psi, coefficient: float | torch.Tensor, mu: torch.Tensor, *,
                      fixed: Mapping[int, torch.Tensor | float] | None = None,
                      steps: int = 100, lr: float | None = None,
                      method: str = "auto", solver: str = "auto") -> torch.Tensor:
    """``argmin over psi.domain of coefficient·ψ(ξ) + ⟨mu, ξ⟩`` (the ξ-player's best response).

    Args:
        psi: the function; ``coefficient·psi`` must be convex.
        coefficient: a float, ``> 0`` for a convex ψ or ``< 0`` for a concave one (checked); or
            a tensor broadcastable to ``mu.shape[:-1]`` (e.g. a multiplier ``λ_j`` of (P2)),
            whose sign cannot be checked without a sync, so it is clamped to the convex side
            (``≥ 0`` for convex ψ, ``≤ 0`` for concave ψ) — a multiplier already is.
        mu: ``[..., n_free]`` linear coefficients, one per free argument (leading dimensions
            are independent problems).
        fixed: ``{argument index: value}`` for arguments held constant (KLD's ``p``); values
            broadcast to ``mu.shape[:-1]``.
        steps, lr, solver: the generic solver's fixed step count, initial step length
            (projected gradient only) and kind (:func:`box_argmin`).
        method: ``"auto"`` (closed form when registered, else ``psi.conjugate_argmax`` when
            set, else generic), ``"closed_form"`` (error if none) or ``"generic"``.

    Returns:
        ``ξ*`` with the shape and dtype of ``mu``, on its device.
    """
    fixed = dict(fixed or {})
    free = _free_indices(psi, fixed, mu)
    if method not in ("auto", "closed_form", "generic"):
        raise ValueError(f"method must be 'auto', 'closed_form' or 'generic', got {method!r}")
    c = _coefficient(psi, coefficient, mu)
    fixed_t = {i: torch.as_tensor(v, dtype=mu.dtype, device=mu.device) for i, v in fixed.items()}
    if method != "generic":
        entry = closed_form(psi, free)
        if entry is not None:
            return entry.fn(c, mu, fixed_t)
        if (method == "auto" and psi.conjugate_argmax is not None and not fixed
                and isinstance(coefficient, float | int) and psi.curvature == "convex"):
            # argmin c·ψ + ⟨μ,ξ⟩ = argmax ⟨−μ/c, ξ⟩ − ψ(ξ) = ∇ψ*(−μ/c) for c > 0.
            return psi.conjugate_argmax(-mu / float(coefficient))
        if method == "closed_form":
            raise ValueError(f"no closed-form best response is registered for {psi.name} with "
                             f"free arguments {free} and domain {psi.domain}; known: "
                             f"{sorted(CLOSED_FORMS)}")
    with torch.inference_mode(False):
        # Tensors made under inference_mode cannot enter the solver's local autograd graph.
        mu, c = mu.detach().clone(), c.detach().clone()
        fixed_t = {i: v.detach().clone() for i, v in fixed_t.items()}
    lo = [float(psi.domain[i][0]) for i in free]
    hi = [float(psi.domain[i][1]) for i in free]

    def objective(xi: torch.Tensor) -> torch.Tensor:
        args: list[torch.Tensor] = []
        it = iter(range(len(free)))
        for i in range(psi.arity):
            args.append(fixed_t[i].expand(xi.shape[:-1]) if i in fixed_t else xi[..., next(it)])
        return c * psi(*args) + (mu * xi).sum(-1)

    return box_argmin(objective, lo, hi, batch_shape=mu.shape[:-1], steps=steps, lr=lr,
                      solver=solver, dtype=mu.dtype, device=mu.device)


def _free_indices(psi: Psi, fixed: Mapping[int, object], mu: torch.Tensor) -> tuple[int, ...]:
    bad = [i for i in fixed if not (isinstance(i, int) and 0 <= i < psi.arity)]
    if bad:
        raise ValueError(f"fixed argument indices {bad} are out of range for {psi.name} "
                         f"(arity {psi.arity})")
    free = tuple(i for i in range(psi.arity) if i not in fixed)
    if not free:
        raise ValueError(f"all arguments of {psi.name} are fixed: there is nothing to solve for")
    if not isinstance(mu, torch.Tensor) or not mu.is_floating_point():
        raise TypeError("mu must be a floating-point torch.Tensor")
    if mu.dim() == 0 or mu.shape[-1] != len(free):
        raise ValueError(f"mu must have shape [..., {len(free)}] (one entry per free argument "
                         f"{free} of {psi.name}), got {tuple(mu.shape)}")
    return free


def _coefficient(psi: Psi, coefficient: float | torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
    if psi.curvature == "none":
        raise ValueError(f"{psi.name} is neither convex nor concave: c·ψ is not convex for any "
                         "c, so its slack best response is not a convex problem")
    if isinstance(coefficient, torch.Tensor):
        c = coefficient.to(dtype=mu.dtype, device=mu.device)
        # Sign cannot be checked without a sync; a multiplier is ≥ 0 by its projection.
        return c.clamp_min(0.0) if psi.curvature == "convex" else c.clamp_max(0.0)
    c = float(coefficient)
    if not math.isfinite(c):
        raise ValueError(f"coefficient must be finite, got {coefficient!r}")
    if psi.curvature == "convex" and not c > 0:
        raise ValueError(f"{psi.name} is convex, so coefficient·ψ is convex only for "
                         f"coefficient > 0; got {coefficient!r}")
    if psi.curvature == "concave" and not c < 0:
        raise ValueError(f"{psi.name} is concave, so coefficient·ψ is convex only for "
                         f"coefficient < 0; got {coefficient!r} (minimise −c·ψ for a loss "
                         "such as 1 − gmean)")
    return torch.tensor(c, dtype=mu.dtype, device=mu.device)


# --------------------------------------------------------------------------- generic solver
SOLVERS = ("auto", "ellipsoid", "projected_gradient")
# "auto": the ellipsoid method's rate degrades like exp(-steps / (2n²)), so beyond a few
# arguments projected gradient steps do better for a fixed step budget.
ELLIPSOID_MAX_DIM = 4


def box_argmin(objective: Callable[[torch.Tensor], torch.Tensor], lo: Sequence[float],
               hi: Sequence[float], *, batch_shape: torch.Size | tuple[int, ...] = (),
               steps: int = 100, lr: float | None = None, solver: str = "auto",
               dtype: torch.dtype = torch.float32,
               device: torch.device | str | None = None) -> torch.Tensor:
    """Minimise a convex ``objective`` over the box ``[lo, hi]`` in a fixed number of steps.

    ``objective`` maps ``x [*batch_shape, n]`` to ``[*batch_shape]`` values of independent
    problems. The bounds are host floats (a ψ's declared domain), so no step needs a sync.
    Gradients come from autograd on a local leaf tensor: the caller's graph is untouched and the
    call works under ``torch.no_grad()``. Every choice is a ``torch.where`` on the device, and
    the best point evaluated is returned (so more steps never give a worse answer).

    Solvers (``"auto"``, the default, takes the ellipsoid method for ``n ≤ 4`` arguments and
    projected gradient beyond):
        ``"ellipsoid"``: the central-cut ellipsoid method (bisection when ``n = 1``);
        only the direction of a (sub)gradient is used, so the infinite slopes of the G-mean or
        KLD on the faces of the box do not matter. The gap shrinks geometrically, by about
        ``exp(-steps / (2n(n+1)))`` in the box's scale; for the small ``n`` of a ψ node,
        100 steps reach ~1e-6 relative accuracy at ``n = 2``.
        ``"projected_gradient"``: projected sign-gradient steps (steepest descent in ℓ∞) of
        length ``lr · γ^t`` decaying geometrically from ``lr`` (default: half the widest
        side) to ``1e-6·lr``; cheaper per step for large ``n``, less accurate near corners.

    The iterates stay a few ulps inside the box (where such ψ have finite gradients); at the
    end the best point is also tried snapped to the faces it touches.

    Example:
        >>> import torch
        >>> f = lambda x: ((x - torch.tensor([0.3, 1.5])) ** 2).sum(-1)
        >>> x = box_argmin(f, [0.0, 0.0], [1.0, 1.0])
        >>> [round(float(v), 3) for v in x]
        [0.3, 1.0]
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    lo, hi = [float(v) for v in lo], [float(v) for v in hi]
    if len(lo) != len(hi) or not lo:
        raise ValueError("lo and hi must give the same, non-zero number of bounds")
    if not all(math.isfinite(a) and math.isfinite(b) and a < b
               for a, b in zip(lo, hi, strict=True)):
        raise ValueError(f"the box must be finite with lo < hi, got lo={lo}, hi={hi}")
    step0 = float(lr) if lr is not None else 0.5 * max(b - a for a, b in zip(lo, hi, strict=True))
    if not step0 > 0:
        raise ValueError(f"lr must be positive, got {lr}")
    n = len(lo)
    if solver == "auto":
        solver = "ellipsoid" if n <= ELLIPSOID_MAX_DIM else "projected_gradient"
    shape = (*batch_shape, n)
    with torch.inference_mode(False), torch.enable_grad():
        box_lo = torch.tensor(lo, dtype=dtype, device=device)
        box_hi = torch.tensor(hi, dtype=dtype, device=device)
        inset = 64 * torch.finfo(dtype).eps * (box_hi - box_lo)
        lo_, hi_ = box_lo + inset, box_hi - inset
        x = (0.5 * (lo_ + hi_)).expand(shape).clone()
        best_x = x.clone()
        best_v = torch.full(shape[:-1], math.inf, dtype=dtype, device=box_lo.device)

        def probe(point: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            leaf = point.detach().requires_grad_(True)
            v = objective(leaf)
            (g,) = torch.autograd.grad(v.sum(), leaf)
            return v.detach(), torch.nan_to_num(g, nan=0.0, posinf=1e30, neginf=-1e30)

        def keep(point: torch.Tensor, v: torch.Tensor) -> None:
            nonlocal best_x, best_v
            better = v < best_v               # NaN never wins
            best_v = torch.where(better, v, best_v)
            best_x = torch.where(better[..., None], point, best_x)

        if solver == "ellipsoid":
            _ellipsoid(probe, keep, x, lo_, hi_, steps)
        else:
            eta, decay = step0, 1e-6 ** (1.0 / max(steps - 1, 1))
            for _ in range(steps):
                v, g = probe(x)
                keep(x, v)
                # Drop components pushing out through an active bound (projected direction).
                g = torch.where(((x <= lo_) & (g > 0)) | ((x >= hi_) & (g < 0)), 0.0, g)
                x = torch.minimum(torch.maximum(x - eta * torch.sign(g), lo_), hi_)
                eta *= decay
            keep(x, objective(x).detach())
        # The minimum may sit on a face the inset iterates only approach.
        snapped = torch.where(best_x <= lo_, box_lo, torch.where(best_x >= hi_, box_hi, best_x))
        keep(snapped, objective(snapped).detach())
    return best_x.detach()


def _ellipsoid(probe: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
               keep: Callable[[torch.Tensor, torch.Tensor], None], center: torch.Tensor,
               lo: torch.Tensor, hi: torch.Tensor, steps: int) -> None:
    """Central-cut ellipsoid method on the box, batched; reports points through ``keep``."""
    n = center.shape[-1]
    half = 0.5 * (hi - lo)
    # The ball {Σ ((x_i − c_i) / half_i)² ≤ n} contains the box.
    shape_p = torch.diag_embed(n * half * half).expand(*center.shape, n).clone()
    if n == 1:
        shrink, tilt = 0.25, 0.0   # bisection: the interval halves, P = r² quarters
    else:
        shrink, tilt = n * n / (n * n - 1.0), 2.0 / (n + 1.0)
    for _ in range(steps):
        inside = ((center >= lo) & (center <= hi)).all(-1)
        feasible = torch.minimum(torch.maximum(center, lo), hi)
        v, g = probe(feasible)
        keep(feasible, v)
        # Outside the box, cut along the most violated coordinate instead of the objective.
        excess = torch.maximum(center - hi, lo - center) / half
        worst = excess.argmax(-1, keepdim=True)
        sign = torch.where((center - hi).gather(-1, worst) > 0, 1.0, -1.0).to(center.dtype)
        box_cut = torch.zeros_like(center).scatter(-1, worst, sign)
        g = torch.where(inside[..., None], g, box_cut)
        pg = (shape_p @ g[..., None])[..., 0]
        gpg = (g * pg).sum(-1, keepdim=True)
        ok = gpg > 0                      # g = 0: the center is optimal; freeze
        step = pg / torch.sqrt(torch.where(ok, gpg, 1.0))
        if n == 1:
            new_p = shape_p * shrink
        else:
            new_p = shrink * (shape_p - tilt * step[..., :, None] * step[..., None, :])
            new_p = 0.5 * (new_p + new_p.transpose(-1, -2))   # keep it symmetric in floats
        center = torch.where(ok, center - step / (n + 1.0), center)
        shape_p = torch.where(ok[..., None], new_p, shape_p)


# --------------------------------------------------------------------------- closed forms
def _face_gmean(k: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    # min_t −c·sqrt(t) + m·t on [0,1], c = −k ≥ 0: t = (c / 2m)² when 2m > c, else 1.
    c = -k
    inside = 2 * m > c
    safe = torch.where(inside, m, torch.ones_like(m))
    return torch.where(inside, (c / (2 * safe)) ** 2, torch.ones_like(m)).clamp(0.0, 1.0)


def _face_hmean(k: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    # min_t −c·2t/(1+t) + m·t on [0,1]: (1+t)² = 2c/m, clipped; m ≤ 0 gives t = 1.
    c = -k
    positive = m > 0
    safe = torch.where(positive, m, torch.ones_like(m))
    t = (torch.sqrt(2 * c / safe) - 1.0).clamp(0.0, 1.0)
    return torch.where(positive, t, torch.ones_like(m))


def _face_rms(k: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    # min_t k·sqrt((1+t²)/2) + m·t on [0,1], k ≥ 0: t/sqrt(1+t²) = √2·(−m)/k =: r, so
    # t = r/sqrt(1−r²) when r < 1/√2 (i.e. 2(−m) < k), t = 1 beyond, t = 0 for m ≥ 0.
    pull = -m
    inside = 2 * pull < k
    safe_k = torch.where(inside & (k > 0), k, torch.ones_like(k))
    r = torch.where(inside, math.sqrt(2.0) * pull.clamp_min(0.0) / safe_k, torch.zeros_like(m))
    t = torch.where(inside, r / torch.sqrt(1.0 - r * r), torch.ones_like(m))
    return torch.where(m >= 0, torch.zeros_like(m), t).clamp(0.0, 1.0)


def _homogeneous2(fn: Callable[..., torch.Tensor],
                  face: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> ClosedFormFn:
    """Closed form for a degree-1 homogeneous ψ of two arguments on ``[0, 1]²``."""

    def solve(c: torch.Tensor, mu: torch.Tensor, fixed: Mapping[int, torch.Tensor]) -> torch.Tensor:
        del fixed
        c = c.expand(mu.shape[:-1])
        m1, m2 = mu[..., 0], mu[..., 1]
        one = torch.ones_like(m1)
        a = torch.stack([one, face(c, m2)], -1)      # on the face u1 = 1
        b = torch.stack([face(c, m1), one], -1)      # on the face u2 = 1
        va = c * fn(a[..., 0], a[..., 1]) + (mu * a).sum(-1)
        vb = c * fn(b[..., 0], b[..., 1]) + (mu * b).sum(-1)
        ab = torch.where((va <= vb)[..., None], a, b)
        vab = torch.minimum(va, vb)
        # The origin has value 0; it wins when no face point is negative.
        return torch.where((vab < 0)[..., None], ab, torch.zeros_like(ab))

    return solve


def _gmean2(u1: torch.Tensor, u2: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(u1 * u2)


def _hmean2(u1: torch.Tensor, u2: torch.Tensor) -> torch.Tensor:
    s = u1 + u2
    return torch.where(s > 0, 2 * u1 * u2 / torch.where(s > 0, s, torch.ones_like(s)), 0.0)


def _rms2(v1: torch.Tensor, v2: torch.Tensor) -> torch.Tensor:
    return torch.sqrt(0.5 * (v1 * v1 + v2 * v2))


def kld_argmin(coefficient: torch.Tensor, mu: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """``argmin_{q in [0,1]} c·KLD(p, q) + μ·q`` for ``c ≥ 0`` (elementwise, broadcasting).

    Stationarity gives ``μq² − (μ+c)q + cp = 0``. With ``B = μ + c`` and
    ``D = B² − 4μcp ≥ (μ − c)² ≥ 0`` its root in ``[0, 1]`` is ``2cp / (B + √D)`` when
    ``B > 0`` (no cancellation) and ``(B − √D) / (2μ)`` otherwise (then ``μ ≤ −c < 0``).

    Example:
        >>> import torch
        >>> round(float(kld_argmin(torch.tensor(1.0), torch.tensor(2.0), torch.tensor(1.0))), 4)
        0.5
    """
    c = coefficient
    b = mu + c
    root_d = torch.sqrt((b * b - 4 * mu * c * p).clamp_min(0.0))
    pos = b > 0
    q_pos = 2 * c * p / torch.where(pos, b + root_d, torch.ones_like(b))
    q_neg = (b - root_d) / torch.where(pos | (mu == 0), torch.ones_like(mu), 2 * mu)
    return torch.where(pos, q_pos, q_neg).clamp(0.0, 1.0)


def _kld_second(c: torch.Tensor, mu: torch.Tensor, fixed: Mapping[int, torch.Tensor]
                ) -> torch.Tensor:
    p = fixed[0].expand(mu.shape[:-1])
    return kld_argmin(c.expand(mu.shape[:-1]), mu[..., 0], p)[..., None]


_UNIT2: Box = ((0.0, 1.0), (0.0, 1.0))
register_closed_form("geometric_mean2", _homogeneous2(_gmean2, _face_gmean), free=(0, 1),
                     domain=_UNIT2)
register_closed_form("harmonic_mean2", _homogeneous2(_hmean2, _face_hmean), free=(0, 1),
                     domain=_UNIT2)
register_closed_form("root_mean_square2", _homogeneous2(_rms2, _face_rms), free=(0, 1),
                     domain=_UNIT2)
register_closed_form("kld", _kld_second, free=(1,), domain=_UNIT2)
