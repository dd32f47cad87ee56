"""A problem's rates on soft true groups as functions of the assignment table ``W``.

When the true group of an example is the soft membership ``W[ĝ, c, :]`` of its cell ``(ĝ, ŷ, y)``
(:mod:`fairgames.noisy_groups.soft_groups`), every 0/1 rate of a problem that reads only labels,
predictions ``1[s > 0]`` and the group attributes is a ratio of two LINEAR functions of ``ω = n ⊙
W`` (``n [m̂, 4]`` the cell counts): ``R_k(W) = ⟨a_k, ω⟩ / ⟨d_k, ω⟩`` (paper 004 Eqs. (13)–(15):
``𝔼[h·w(j|Ŷ,Y,Ĝ)]`` over the cells). :class:`CellRates` finds ``a`` and ``d`` once, from the
problem's own evaluator on a "cell batch" of one example per ``(k, c, j)`` (``scores ±1``, ``labels
y``, true group ``j``): each example alone gives one column. The soft-assignment player ascends the
Lagrangian with them (:meth:`CellRates.gradient`) and the exact worst case solves its LP with them
(:mod:`fairgames.noisy_groups.soft_worst_case`).

Example:
    >>> import torch
    >>> from fairgames.rates import group, true_positive_rate
    >>> from fairgames.game import Problem
    >>> tpr = lambda v: true_positive_rate(group("g", v))
    >>> problem = Problem(tpr("a"), [tpr("b") >= tpr("a") - 0.05])
    >>> cells = CellRates(problem, "g", ["a", "b"], n_noisy=2)
    >>> counts = torch.tensor([[5.0, 2.0, 1.0, 6.0], [3.0, 4.0, 0.0, 2.0]])
    >>> w = torch.zeros(2, 4, 2); w[0, :, 0] = 1; w[1, :, 1] = 1     # Ĝ = G
    >>> [round(float(x), 4) for x in cells.leaves(counts, w)[0]]     # TPR(a), TPR(b)
    [0.75, 0.3333]
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fairgames.game.problem import Problem
from fairgames.rates import Batch, RatesError

from .soft_groups import CELLS


class CellRates:
    """The leaves of ``problem`` (in its evaluator's order) on soft groups of ``attribute``.

    Args:
        problem: the problem; its rates must read only labels, predictions at threshold 0
            and the group attributes named here.
        attribute: the soft attribute its constraints read (values ``true_values``).
        true_values: the names of the true groups ``j`` (columns of ``W``).
        n_noisy: ``m̂``, the number of noisy groups.
        noisy: optional ``(attribute, value names)`` of the hard noisy codes, when the
            problem reads them too (under another name than ``attribute``).
        device: where the coefficients live.
    """

    def __init__(self, problem: Problem, attribute: str, true_values: Sequence[str],
                 n_noisy: int, *, noisy: tuple[str, Sequence[str]] | None = None,
                 device: torch.device | str | None = None) -> None:
        m, rows = len(true_values), n_noisy * CELLS * len(true_values)
        r = torch.arange(rows)
        j, c, k = r % m, (r // m) % CELLS, r // (m * CELLS)
        groups, names = {attribute: j}, {attribute: list(true_values)}
        if noisy is not None and noisy[0] != attribute:
            groups[noisy[0]], names[noisy[0]] = k, list(noisy[1])
        batch = Batch(scores=torch.where(c >= 2, 1.0, -1.0), labels=(c % 2).float(),
                      groups=groups, group_values=names)
        ev = problem.make_evaluator()
        try:
            values, code = ev.example_columns(batch, torch.float64, bounds=False)
            cells = ev.hard_cells(batch)
            per_row = torch.zeros(rows, cells, values.shape[1], dtype=torch.float64)
            per_row[torch.arange(rows), code] = values
            true, weight = ev.leaf_values_of_sums(batch, per_row.reshape(rows, -1))
        except (RatesError, KeyError) as error:
            raise ValueError(
                f"soft group assignments need a problem whose rates read only labels, "
                f"predictions and the attribute {attribute!r}"
                + (f" (and {noisy[0]!r})" if noisy else "") + f": {error}") from error
        if any(ind.threshold or not ind.strict for ind in ev.indicators):
            raise ValueError("soft group assignments read predictions 1[s > 0] only; the "
                             "problem has rates at other score thresholds")
        if ev.losses:
            raise ValueError("soft group assignments cover rates, not group losses")
        self.shape = (n_noisy, CELLS, m)
        self.num = (true.nan_to_num(0.0) * weight).float().to(device)     # a [K, R]
        self.den = weight.float().to(device)                              # d [K, R]
        spread = self.den.view(-1, n_noisy * CELLS, m)
        numer = self.num.view(-1, n_noisy * CELLS, m)
        # a leaf depends on W when some cell's coefficients differ between true groups
        self.depends = ((spread.amax(2) != spread.amin(2)).any(1)
                        | (numer.amax(2) != numer.amin(2)).any(1))       # [K] bool

    def leaves(self, counts: torch.Tensor, w: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(R(W) [K], denominators [K])`` at cell counts ``[m̂, 4]`` (0 where a leaf's
        subset has no weight)."""
        omega = (counts.to(w.dtype)[:, :, None] * w).reshape(-1)
        num = self.num.to(w.dtype) @ omega
        den = self.den.to(w.dtype) @ omega
        some = den > 0
        return torch.where(some, num / torch.where(some, den, torch.ones_like(den)), 0.0), den

    def gradient(self, costs: torch.Tensor, counts: torch.Tensor, w: torch.Tensor
                 ) -> torch.Tensor:
        """``∂/∂W Σ_k costs_k·R_k(W)`` ``[m̂, 4, m]``: ``Σ_k (c_k/D_k)(a_k − R_k·d_k) ⊙ n``
        (a leaf with ``D_k = 0`` contributes nothing)."""
        return self._unit_gradient(costs, counts, w) * counts.to(w.dtype)[:, :, None]

    def count_gradient(self, costs: torch.Tensor, counts: torch.Tensor, w: torch.Tensor
                       ) -> torch.Tensor:
        """``∂/∂n Σ_k costs_k·R_k`` ``[m̂, 4]`` at ``W`` fixed: what one more example in cell
        ``(k, c)`` adds, ``Σ_j W[k,c,j]·Σ_k (c_k/D_k)(a_k − R_k·d_k)[k,c,j]``. An example whose
        prediction flips moves from cell ``(k, y)`` to ``(k, 2 + y)``, taking that cell's
        ``W`` row with it: this difference is θ's true price of the flip.

        Example:
            >>> import torch
            >>> from fairgames.rates import group, true_positive_rate
            >>> from fairgames.game import Problem
            >>> problem = Problem(true_positive_rate(group("g", "a")))
            >>> cells = CellRates(problem, "g", ["a", "b"], n_noisy=1)
            >>> w = torch.tensor([[[0.5, 0.5], [1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]])
            >>> counts = torch.tensor([[3.0, 4.0, 1.0, 2.0]])   # TPR(a) = 0 at this W
            >>> cells.count_gradient(torch.ones(1), counts, w)[0, [1, 3]].tolist()
            [0.0, 0.0]
        """
        unit = self._unit_gradient(costs, counts, w)
        return (unit * w).sum(-1)

    def _unit_gradient(self, costs: torch.Tensor, counts: torch.Tensor, w: torch.Tensor
                       ) -> torch.Tensor:
        """``Σ_k (c_k/D_k)(a_k − R_k·d_k)`` ``[m̂, 4, m]`` (``D_k = 0``: nothing)."""
        leaves, den = self.leaves(counts, w)
        some = den > 0
        coef = torch.where(some, costs / torch.where(some, den, torch.ones_like(den)), 0.0)
        grad = coef @ self.num.to(w.dtype) - (coef * leaves) @ self.den.to(w.dtype)
        return grad.view(self.shape)
