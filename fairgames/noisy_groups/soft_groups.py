"""The feasible set 𝒲(θ) of soft group assignments (paper 004, Sec. 4) and its projection.

A table ``W [m̂, 4, m]`` holds ``W[k, c, j] = w(j | ŷ, y, k)``, an estimate of
``P(G = j | Ŷ = ŷ, Y = y, Ĝ = k)``: noisy group ``k``, cell ``c = 2·ŷ + y`` (0: ŷ=0,y=0;
1: ŷ=0,y=1; 2: ŷ=1,y=0; 3: ŷ=1,y=1 — row ``4k + c`` of the authors' code), true group ``j``.
With the model's statistics ``v[k, c] = P(Ŷ(θ) = ŷ, Y = y | Ĝ = k)`` (this module's
:func:`cell_fractions` of a batch's or a split's :func:`cell_counts`) and the noise model
``b[j, k] = P(G = j | Ĝ = k)`` (:func:`~fairgames.data.estimate_group_noise`'s
``p_true_given_noisy``), paper 004's Eq. (5) is

* ``Σ_c v[k, c]·W[k, c, j] = b[j, k]`` for every ``j, k`` — the law of total probability
  ``Σ_{ŷ,y} w(j|ŷ,y,k)·P(Ŷ=ŷ, Y=y | Ĝ=k) = P(G=j | Ĝ=k)`` (the only rows that depend on θ);
* ``Σ_j W[k, c, j] = 1`` for every ``k, c`` — each ``w(·|ŷ,y,k)`` is a distribution;
* ``W ≥ 0``.

``W[k, c, :] = b[:, k]`` (the noise model itself, the same for every cell) meets all three for
every θ, so 𝒲(θ) is never empty: it is where the player starts (:func:`initial_assignments`).

The Euclidean projection onto 𝒲(θ) is Dykstra's algorithm on two sets, the affine set of
both equalities and the orthant, for a FIXED number of iterations (the authors' code: 20;
the result converges to the projection as the iterations grow). The affine piece is solved in
closed form per noisy group (see :func:`project_affine`): no linear solver, no host sync. A
noisy group absent from the statistics (``v[k] = 0``: its rows ``0 = b[j, k]`` have no
solution, ``AAᵀ`` is singular) keeps only its simplex rows — the pseudo-inverse solution.

Example:
    >>> import torch
    >>> b = torch.tensor([[0.8, 0.3], [0.2, 0.7]])          # P(G = j | Ĝ = k)
    >>> v = torch.tensor([[0.4, 0.1, 0.2, 0.3], [0.5, 0.2, 0.1, 0.2]])
    >>> w = project_soft_assignments(torch.rand(2, 4, 2), v, b, iterations=500)
    >>> bool((w >= 0).all()), torch.allclose(w.sum(2), torch.ones(2, 4), atol=1e-4)
    (True, True)
    >>> torch.allclose(torch.einsum("kc,kcj->jk", v, w), b, atol=1e-4)
    True
"""

from __future__ import annotations

import torch

CELLS = 4
"""Cells ``c = 2·ŷ + y`` of one noisy group."""


def check_noise_model(p_true_given_noisy: torch.Tensor, tolerance: float = 1e-4
                      ) -> torch.Tensor:
    """``b [m, m̂]`` as float, checked (on the host: call it once, not in a step): finite,
    non-negative, each column a distribution over the true groups.

    Example:
        >>> check_noise_model(torch.tensor([[0.9, 0.2], [0.1, 0.8]])).shape
        torch.Size([2, 2])
    """
    b = torch.as_tensor(p_true_given_noisy)
    if b.dim() != 2 or b.shape[0] < 1 or b.shape[1] < 1:
        raise ValueError("p_true_given_noisy must be a [true groups, noisy groups] matrix of "
                         f"P(G = j | Ĝ = k), got shape {tuple(b.shape)}")
    b = b.to(torch.float64)
    if not bool(torch.isfinite(b).all()) or bool((b < 0).any()):
        bad = [k for k in range(b.shape[1]) if not bool(torch.isfinite(b[:, k]).all())]
        raise ValueError("p_true_given_noisy must be finite and non-negative"
                         + (f"; noisy groups {bad} have NaN columns (no auxiliary row with "
                            "that noisy group: estimate on more rows or give the column)"
                            if bad else ""))
    sums = b.sum(0)
    off = [k for k in range(b.shape[1]) if abs(float(sums[k]) - 1.0) > tolerance]
    if off:
        raise ValueError(f"each column of p_true_given_noisy is P(G = · | Ĝ = k) and must sum "
                         f"to 1; columns {off} sum to {[round(float(sums[k]), 6) for k in off]}")
    return b


def initial_assignments(b: torch.Tensor) -> torch.Tensor:
    """``W[k, c, j] = b[j, k]`` ``[m̂, 4, m]``: feasible for every θ (see the module docstring).

    Example:
        >>> initial_assignments(torch.tensor([[0.9, 0.2], [0.1, 0.8]]))[1, 3].tolist()
        [0.20000000298023224, 0.800000011920929]
    """
    return b.t()[:, None, :].expand(b.shape[1], CELLS, b.shape[0]).contiguous()


def cell_codes(noisy: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor
               ) -> torch.Tensor:
    """Each example's row ``4·ĝ + 2·ŷ + y`` of ``W`` (``ŷ = 1[s > 0]``, no gradient) ``[B]``.

    Example:
        >>> cell_codes(torch.tensor([0, 1]), torch.tensor([0.5, -1.0]), torch.tensor([1.0, 0.0]))
        tensor([3, 4])
    """
    yhat = (scores.detach() > 0).long()
    return noisy.long() * CELLS + 2 * yhat + labels.detach().long()


def cell_counts(codes: torch.Tensor, n_noisy: int, weights: torch.Tensor | None = None,
                dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The (weighted) number of examples of each cell ``[m̂, 4]`` (no sync: ``index_add``).

    Example:
        >>> cell_counts(torch.tensor([3, 4, 3]), 2).tolist()
        [[0.0, 0.0, 0.0, 2.0], [1.0, 0.0, 0.0, 0.0]]
    """
    w = (weights.to(dtype) if weights is not None
         else torch.ones(codes.shape[0], dtype=dtype, device=codes.device))
    out = torch.zeros(n_noisy * CELLS, dtype=dtype, device=codes.device)
    return out.index_add_(0, codes, w).view(n_noisy, CELLS)


def cell_fractions(counts: torch.Tensor) -> torch.Tensor:
    """``v[k, c] = P(Ŷ = ŷ, Y = y | Ĝ = k)`` from cell counts; a noisy group without examples
    gets ``v[k] = 0`` (its total-probability rows drop out of 𝒲).

    Example:
        >>> cell_fractions(torch.tensor([[1.0, 0.0, 1.0, 2.0], [0.0, 0.0, 0.0, 0.0]])).tolist()
        [[0.25, 0.0, 0.25, 0.5], [0.0, 0.0, 0.0, 0.0]]
    """
    total = counts.sum(1, keepdim=True)
    return counts / torch.where(total > 0, total, torch.ones_like(total))


def project_affine(w: torch.Tensor, v: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Projection of ``w [..., m̂, 4, m]`` onto ``{Σ_c v[k,c]·W[k,c,j] = b[j,k],
    Σ_j W[k,c,j] = 1}`` (leading dimensions are a batch of tables).

    Why a closed form: per noisy group ``k`` (write ``Y = w[k]``, ``v = v[k]``, ``β = b[:, k]``)
    the constraints' normals are ``v·e_jᵀ`` and ``e_c·1ᵀ``, so the projection is
    ``X = Y − v·αᵀ − β'·1ᵀ``. The simplex rows give ``β' = (Y·1 − 1)/m − v·s/m`` with
    ``s = Σ_j α_j``; summed over ``j`` the group rows repeat the simplex rows (``Σ_c v = 1``,
    ``Σ_j β = 1``: ``AAᵀ`` has rank deficiency 1 per group), so ``s`` is free and ``s = 0``
    gives the least-norm multipliers: ``α = (Yᵀv − β − (vᵀβ')·1)/‖v‖²``. With ``v = 0`` (a
    noisy group absent from the statistics) the group rows vanish: ``α = 0``.
    """
    m = w.shape[-1]
    beta = (w.sum(-1) - 1.0) / m                                  # [..., m̂, 4]
    vv = (v * v).sum(1)                                           # [m̂]
    vb = (v * beta).sum(-1)                                       # [..., m̂]
    yv = (w * v[:, :, None]).sum(-2)                              # [..., m̂, m]
    present = vv > 0
    alpha = (yv - b.t() - vb[..., None]) / torch.where(present, vv, torch.ones_like(vv))[:, None]
    alpha = torch.where(present[:, None], alpha, torch.zeros_like(alpha))
    return w - v[:, :, None] * alpha[..., None, :] - beta[..., None]


def affine_projector(v: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`project_affine` as the affine map ``vec(W) ↦ M·vec(W) + o`` (``M [n, n]``,
    ``o [n]``, ``n = m̂·4·m``), built once per statistics ``v`` so that each Dykstra round is
    one mat-vec.

    Example:
        >>> v, b = torch.tensor([[0.5, 0.5, 0.0, 0.0]]), torch.tensor([[0.3], [0.7]])
        >>> mat, off = affine_projector(v, b)
        >>> w = torch.rand(1, 4, 2)
        >>> torch.allclose(mat @ w.reshape(-1) + off, project_affine(w, v, b).reshape(-1))
        True
    """
    shape = (v.shape[0], CELLS, b.shape[0])
    n = shape[0] * shape[1] * shape[2]
    off = project_affine(torch.zeros(shape, dtype=v.dtype, device=v.device), v, b)
    basis = torch.eye(n, dtype=v.dtype, device=v.device).view(n, *shape)
    mat = (project_affine(basis, v, b) - off).reshape(n, n).t()
    return mat, off.reshape(-1)


def project_soft_assignments(w: torch.Tensor, v: torch.Tensor, b: torch.Tensor, *,
                             iterations: int = 20) -> torch.Tensor:
    """Dykstra's projection of ``w`` onto 𝒲 (``v [m̂, 4]`` the cell fractions, ``b [m, m̂]``
    the noise model): :func:`dykstra` with the :func:`affine_projector` of ``(v, b)``."""
    return dykstra(w, affine_projector(v.to(w.dtype), b.to(w.dtype)), iterations)


def dykstra(w: torch.Tensor, projector: tuple[torch.Tensor, torch.Tensor],
            iterations: int) -> torch.Tensor:
    """``iterations`` rounds of Dykstra's algorithm (the affine map ``projector``, then the
    clamp at 0): non-negative, and on the affine set up to the remaining Dykstra error. The
    affine set needs no correction term (its corrections lie in its normal space); the
    orthant keeps one.

    Example:
        >>> v, b = torch.tensor([[0.5, 0.5, 0.0, 0.0]]), torch.tensor([[0.3], [0.7]])
        >>> w = dykstra(torch.zeros(1, 4, 2), affine_projector(v, b), 100)
        >>> round(float(0.5 * w[0, 0, 0] + 0.5 * w[0, 1, 0]), 4), bool((w >= 0).all())
        (0.3, True)
    """
    if iterations < 1:
        raise ValueError(f"iterations must be at least 1, got {iterations}")
    mat, off = projector
    x = w.reshape(-1)
    q = torch.zeros_like(x)
    for _ in range(int(iterations)):
        y = torch.addmv(off, mat, x)
        x = (y + q).clamp_min(0.0)
        q = y + q - x
    return x.view(w.shape)


def memberships(w: torch.Tensor) -> torch.Tensor:
    """``W`` as memberships a :class:`~fairgames.rates.Batch` accepts: in ``[0, 1]`` with rows
    summing to at most 1 (a few Dykstra rounds leave sums a little off 1).

    Example:
        >>> w = memberships(torch.tensor([[0.7, 0.5], [-0.1, 0.4]]))
        >>> [[round(x, 4) for x in row] for row in w.tolist()]
        [[0.5833, 0.4167], [0.0, 0.4]]
    """
    w = w.clamp(0.0, 1.0)
    return w / w.sum(-1, keepdim=True).clamp_min(1.0)
