"""COCO (Narasimhan 2018, "Learning with complex loss functions and constraints"): a convex
metric of per-group confusion matrices minimised under convex constraints by gradient
descent-ascent, whose inner minimisation is Frank-Wolfe over the achievable confusion matrices
with a **plug-in cost-sensitive oracle** — paper 000's Table 3 baseline (its Algorithm 1 with
a plug-in oracle instead of a trained one).

A classifier's statistics on the fitting data are the joint proportions ``tp, fp, fn, tn``
of each group (a :class:`Confusion`, each ``[G]``, summing to 1 over all entries). For a linear
cost ``⟨W, C⟩`` the Bayes-optimal classifier given the class probability ``η(x)`` is

    predict 1  iff  η·(W_tp − W_fn) + (1 − η)·(W_fp − W_tn) < 0     (per group),

which is a per-group threshold on ``η`` (the oracle). COCO plays, for ``outer_steps`` rounds:
``inner_steps`` Frank-Wolfe steps on ``L(C, λ) = ψ(C) + Σ_j λ_j φ_j(C)`` warm-started from the
previous round (step ``2 / (k + 3)``; gradients by autograd), then projected gradient ascent
``λ ← Π(λ + multiplier_lr · φ(C))`` on ``λ ≥ 0`` (and ``‖λ‖₁ ≤ radius``). The output is the
uniform average over rounds of the rounds' mixtures: a **stochastic** classifier whose
positive probability per row is :meth:`COCO.predict_proba`.

Example:
    >>> import torch
    >>> g = torch.Generator().manual_seed(0)
    >>> eta = torch.rand(2000, generator=g)
    >>> y = (torch.rand(2000, generator=g) < eta).double()
    >>> groups = (torch.rand(2000, generator=g) < eta).long()     # group 1 has more positives
    >>> p = float(y.mean())
    >>> kld_sum = lambda c: sum(kld(p, c.positive_rate(j)) for j in range(2))
    >>> coco = COCO(kld_sum, [lambda c: c.error() - 0.30], outer_steps=100,
    ...             multiplier_lr=5.0).fit(eta, y, groups)
    >>> c = coco.confusion(eta, y, groups)
    >>> float(c.error()) <= 0.305, float(kld_sum(c)) < float(kld_sum(coco.initial_confusion))
    (True, True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .checks import ArrayLike, BaselineError, as_groups, as_labels, as_vector

EPS = 1e-6


@dataclass(frozen=True)
class Confusion:
    """Per-group joint proportions over the whole data (each ``[G]``; all 4G sum to 1)."""

    tp: torch.Tensor
    fp: torch.Tensor
    fn: torch.Tensor
    tn: torch.Tensor

    @staticmethod
    def from_tensor(c: torch.Tensor) -> Confusion:
        """From a ``[G, 4]`` tensor with columns tp, fp, fn, tn."""
        return Confusion(c[:, 0], c[:, 1], c[:, 2], c[:, 3])

    def share(self, group: int | None = None) -> torch.Tensor:
        """P(G = group) (1 for ``None``)."""
        s = self.tp + self.fp + self.fn + self.tn
        return s.sum() if group is None else s[group]

    def _pick(self, t: torch.Tensor, group: int | None) -> torch.Tensor:
        return t.sum() if group is None else t[group]

    def error(self, group: int | None = None) -> torch.Tensor:
        """P(ŷ ≠ y | G = group)."""
        return (self._pick(self.fp, group) + self._pick(self.fn, group)) / self.share(group)

    def positive_rate(self, group: int | None = None) -> torch.Tensor:
        """P(ŷ = 1 | G = group)."""
        return (self._pick(self.tp, group) + self._pick(self.fp, group)) / self.share(group)

    def base_rate(self, group: int | None = None) -> torch.Tensor:
        """P(y = 1 | G = group) (does not depend on the classifier)."""
        return (self._pick(self.tp, group) + self._pick(self.fn, group)) / self.share(group)

    def fmeasure(self, group: int | None = None) -> torch.Tensor:
        """2TP / (2TP + FP + FN) within the group."""
        tp, fp, fn = (self._pick(t, group) for t in (self.tp, self.fp, self.fn))
        return 2 * tp / (2 * tp + fp + fn).clamp_min(EPS)


def kld(p: float | torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KLD(p, q) of two Bernoulli parameters, ``q`` clamped to ``[1e-6, 1 − 1e-6]``."""
    q = q.clamp(EPS, 1 - EPS)
    p = torch.as_tensor(p, dtype=q.dtype)
    return torch.xlogy(p, p) - p * torch.log(q) + torch.xlogy(1 - p, 1 - p) \
        - (1 - p) * torch.log(1 - q)


Metric = Callable[[Confusion], torch.Tensor]


class COCO:
    """Constrained plug-in learning by Frank-Wolfe and gradient descent-ascent.

    Args:
        objective: ``ψ(C)``, a differentiable function of a :class:`Confusion` (convex for
            the guarantee), minimised.
        constraints: functions ``φ_j(C)``, each ``≤ 0`` at a solution.
        outer_steps, inner_steps: rounds of λ ascent and Frank-Wolfe steps per round.
        multiplier_lr: the λ step size.
        radius: ``‖λ‖₁ ≤ radius`` (``None``: unbounded).

    Attributes (after ``fit``): ``members`` ``[M, G, 2]`` (coefficients ``a, b`` of
    "predict 1 iff a·η + b < 0" per group), ``weights`` ``[M]``, ``multipliers`` ``[J]``,
    ``initial_confusion`` (of the plug-in ``η > 1/2``) and ``history`` (per round: objective,
    constraints, λ of the round's mixture).
    """

    def __init__(self, objective: Metric, constraints: Sequence[Metric] = (), *,
                 outer_steps: int = 200, inner_steps: int = 5, multiplier_lr: float = 1.0,
                 radius: float | None = None) -> None:
        if not callable(objective) or not all(callable(c) for c in constraints):
            raise BaselineError("objective and constraints must be callables of a Confusion")
        if outer_steps < 1 or inner_steps < 1:
            raise BaselineError(f"outer_steps and inner_steps must be >= 1, got "
                                f"{outer_steps}, {inner_steps}")
        if not multiplier_lr > 0 or (radius is not None and not radius > 0):
            raise BaselineError("multiplier_lr and radius must be positive")
        self.objective, self.constraints = objective, list(constraints)
        self.outer_steps, self.inner_steps = int(outer_steps), int(inner_steps)
        self.multiplier_lr, self.radius = float(multiplier_lr), radius
        self.members: torch.Tensor | None = None
        self.weights: torch.Tensor | None = None
        self.multipliers: torch.Tensor | None = None
        self.n_groups = 0
        self.history: list[dict[str, object]] = []

    # ------------------------------------------------------------------ pieces
    @staticmethod
    def _member_predictions(members: torch.Tensor, eta: torch.Tensor, codes: torch.Tensor
                            ) -> torch.Tensor:
        """``[M, N]`` 0/1 predictions of each member."""
        a = members[:, :, 0][:, codes]
        b = members[:, :, 1][:, codes]
        return (a * eta[None, :] + b < 0).double()

    @staticmethod
    def _confusion_of(pred: torch.Tensor, y: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
        """``[M, G, 4]`` joint proportions of predictions ``[M, N]``."""
        n = y.shape[0]
        cols = torch.stack([pred * y, pred * (1 - y), (1 - pred) * y, (1 - pred) * (1 - y)],
                           dim=-1)                                  # [M, N, 4]
        return torch.einsum("mnk,ng->mgk", cols, onehot) / n

    @staticmethod
    def _oracle(grad: torch.Tensor) -> torch.Tensor:
        """The plug-in cost-sensitive classifier for the linear cost ``grad`` ``[G, 4]``."""
        w_tp, w_fp, w_fn, w_tn = grad.unbind(-1)
        b = w_fp - w_tn
        a = (w_tp - w_fn) - b
        return torch.stack([a, b], dim=-1)                          # [G, 2]

    def _lagrangian(self, c: torch.Tensor, lam: torch.Tensor) -> tuple[torch.Tensor, ...]:
        conf = Confusion.from_tensor(c)
        f = self.objective(conf)
        g = (torch.stack([torch.as_tensor(phi(conf), dtype=c.dtype).reshape(())
                          for phi in self.constraints])
             if self.constraints else c.new_zeros(0))
        return f + (lam * g).sum(), f, g

    # ------------------------------------------------------------------ fit / predict
    def fit(self, eta: ArrayLike, labels: ArrayLike, groups: ArrayLike, *,
            n_groups: int | None = None) -> COCO:
        """Fit on class probabilities ``eta`` ``[N]`` in [0, 1], 0/1 labels and group codes."""
        e = as_vector(eta, "eta")
        if ((e < 0) | (e > 1)).any():
            raise BaselineError("eta must be class probabilities in [0, 1]")
        y = as_labels(labels, len(e))
        codes, count = as_groups(groups, len(e), n_groups)
        self.n_groups = count
        onehot = torch.nn.functional.one_hot(codes, count).double()
        first = torch.tensor([[-1.0, 0.5]], dtype=torch.float64).repeat(count, 1)
        members = [first]
        c_cur = self._confusion_of(self._member_predictions(first[None], e, codes), y,
                                   onehot)[0]
        self.initial_confusion = Confusion.from_tensor(c_cur)
        # w: the current round's mixture over members; total: the sum of the rounds' mixtures;
        # both grow by one entry per Frank-Wolfe step.
        w = [1.0]
        total = [0.0]
        lam = torch.zeros(len(self.constraints), dtype=torch.float64)
        self.history = []
        for _ in range(self.outer_steps):
            for k in range(self.inner_steps):
                c = c_cur.clone().requires_grad_(True)
                value = self._lagrangian(c, lam)[0]
                if not torch.isfinite(value):
                    raise BaselineError("COCO: the objective or a constraint is not finite at "
                                        "the current classifier")
                (grad,) = torch.autograd.grad(value, c)
                member = self._oracle(grad)
                members.append(member)
                c_new = self._confusion_of(self._member_predictions(member[None], e, codes), y,
                                           onehot)[0]
                gamma = 2.0 / (k + 3)
                c_cur = (1 - gamma) * c_cur + gamma * c_new
                w = [(1 - gamma) * v for v in w] + [gamma]
                total.append(0.0)
            with torch.no_grad():
                _, f, g = self._lagrangian(c_cur, lam)
            total = [t + v for t, v in zip(total, w, strict=True)]
            self.history.append({"objective": float(f), "constraints": g.tolist(),
                                 "multipliers": lam.tolist()})
            lam = (lam + self.multiplier_lr * g).clamp_min(0.0)
            if self.radius is not None and lam.sum() > self.radius:
                lam = lam * (self.radius / lam.sum())
        total = torch.tensor(total, dtype=torch.float64)
        weights = total / total.sum()
        keep = weights > 0
        self.members = torch.stack(members)[keep]
        self.weights = weights[keep]
        self.multipliers = lam
        return self

    def _check_fitted(self) -> None:
        if self.members is None or self.weights is None:
            raise BaselineError("COCO is not fitted; call fit() first")

    def predict_proba(self, eta: ArrayLike, groups: ArrayLike) -> torch.Tensor:
        """P(ŷ = 1) ``[N]`` of the stochastic classifier (the mixture's expectation)."""
        self._check_fitted()
        assert self.members is not None and self.weights is not None
        e = as_vector(eta, "eta")
        g = as_vector(groups, "groups", n=len(e))
        if (g != g.round()).any() or (g < 0).any() or (g >= self.n_groups).any():
            raise BaselineError(f"groups must be integer codes 0..{self.n_groups - 1}")
        out = torch.zeros(len(e), dtype=torch.float64)
        for start in range(0, len(self.weights), 256):
            sl = slice(start, start + 256)
            pred = self._member_predictions(self.members[sl], e, g.long())
            out += self.weights[sl] @ pred
        return out.clamp(0.0, 1.0)

    def confusion(self, eta: ArrayLike, labels: ArrayLike, groups: ArrayLike) -> Confusion:
        """The stochastic classifier's expected :class:`Confusion` on data."""
        p = self.predict_proba(eta, groups)
        y = as_labels(labels, len(p))
        codes, _ = as_groups(groups, len(p), self.n_groups)
        onehot = torch.nn.functional.one_hot(codes, self.n_groups).double()
        return Confusion.from_tensor(self._confusion_of(p[None], y, onehot)[0])
