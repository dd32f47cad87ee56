"""Sparse row matrices of the compiled Lagrangian: the same game as the dense ones, memory
O(nnz), and the default preset's switch for large games."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from fairgames.game import ConstrainedOptimizer, LargeGameWarning, Problem
from fairgames.game import sparse as sparse_module
from fairgames.game.sparse import RowMatrix
from fairgames.rates import Batch, group, true_positive_rate


def _random_rows(m: int, k: int, seed: int) -> list[dict[int, float]]:
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(m):
        cols = torch.randperm(k, generator=gen)[: int(torch.randint(0, 4, (1,), generator=gen))]
        rows.append({int(c): float(torch.randn(1, generator=gen)) for c in cols})
    return rows


def _reference(rows: list[dict[int, float]], k: int) -> torch.Tensor:
    out = torch.zeros(len(rows), k, dtype=torch.float64)
    for j, row in enumerate(rows):
        for i, v in row.items():
            out[j, i] = torch.tensor(v, dtype=torch.float32).double()
    return out


@pytest.mark.parametrize("sparse", [True, False])
def test_row_matrix_products_match_a_dense_reference(sparse):
    m, k = 60, 45
    rows = _random_rows(m, k, 0)
    ref = _reference(rows, k)
    mat = RowMatrix(rows, k, sparse=sparse)
    x, y = torch.randn(k, dtype=torch.float64), torch.randn(m, dtype=torch.float64)
    torch.testing.assert_close(mat.mv(x), ref @ x, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(mat.t().mv(y), ref.t() @ y, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(mat.positive().mv(x), ref.clamp_min(0) @ x, rtol=1e-12,
                               atol=1e-12)
    torch.testing.assert_close(mat.negative().mv(x), ref.clamp_max(0) @ x, rtol=1e-12,
                               atol=1e-12)
    assert torch.equal(mat.dense().double(), ref)
    assert mat.nnz == int((ref != 0).sum())


def _groups_problem(k: int) -> Problem:
    cons = [true_positive_rate(group("g", str(v))) >= true_positive_rate() - 0.05
            for v in range(k)]
    return Problem(None, cons, loss=lambda s, b: F.binary_cross_entropy_with_logits(s, b.labels))


def _play(k: int, steps: int, preset: str) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(512, 5, generator=gen)
    y = (x[:, 0] + 0.3 * torch.randn(512, generator=gen) > 0).float()
    g = torch.randint(0, k, (512,), generator=gen)
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 1)
    copt = ConstrainedOptimizer(_groups_problem(k), torch.optim.SGD(model.parameters(), lr=0.1),
                                preset=preset)
    batch = dict(labels=y, groups={"g": g}, group_values={"g": [str(v) for v in range(k)]})
    for _ in range(steps):
        copt.zero_grad()
        copt.lagrangian(Batch(scores=model(x)[:, 0], **batch)).backward()
        copt.step()
    values = copt.terms.truth(torch.rand(len(copt.problem.leaves),
                                         generator=torch.Generator().manual_seed(1)))
    omega, lam = copt.multipliers.weights_snapshot()
    return {"weight": model.weight.detach().clone(), "bias": model.bias.detach().clone(),
            "omega": omega, "multipliers": lam, "objective": values[0],
            "constraints": values[1], "sparse": torch.tensor(copt.terms.affine.sparse)}


@pytest.mark.parametrize("preset", ["lagrangian", "proxy_lagrangian"])
def test_sparse_and_dense_games_agree(monkeypatch, preset):
    monkeypatch.setattr(sparse_module, "SPARSE_ENTRIES", 10**12)
    dense = _play(40, 30, preset)
    monkeypatch.setattr(sparse_module, "SPARSE_ENTRIES", 0)
    sparse = _play(40, 30, preset)
    assert not dense.pop("sparse") and sparse.pop("sparse")
    assert float(dense["multipliers"].abs().max()) > 0      # the constraints did play
    for key, value in dense.items():
        torch.testing.assert_close(sparse[key], value, rtol=1e-6, atol=1e-6, msg=key)


def test_many_constraints_compile_to_memory_linear_in_the_constraints():
    k = 2000                                   # M·K = 4·10⁶ entries, 4 001 non-zeros
    terms = _groups_problem(k).terms
    assert terms.affine.sparse and terms.original.matrix.sparse
    assert terms.affine.matrix.nnz == 2 * k
    stored = sum(b.numel() for b in terms.buffers()) + sum(
        b.numel() for b in terms.original.buffers())
    assert stored < 40 * k, stored             # O(M + K + nnz), not O(M·K)


def test_small_problems_keep_dense_rows():
    terms = _groups_problem(8).terms
    assert not terms.affine.sparse
    assert terms.a.shape == (8, 9)             # TPR(g) per group and the overall TPR


def test_default_preset_switches_to_a_linear_player_above_the_documented_rows():
    from fairgames.game import SWAP_REGRET_MAX_ROWS
    model = torch.nn.Linear(2, 1)
    large = _groups_problem(SWAP_REGRET_MAX_ROWS + 1)
    with pytest.warns(LargeGameWarning, match="swap regret.*'lagrangian'"):
        copt = ConstrainedOptimizer(large, torch.optim.SGD(model.parameters(), lr=0.1))
    assert copt.preset.name == "lagrangian" and copt.preset.multipliers == "gradient_ascent"
    assert copt.preset_note is not None and str(SWAP_REGRET_MAX_ROWS) in copt.preset_note
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        named = ConstrainedOptimizer(large, torch.optim.SGD(model.parameters(), lr=0.1),
                                     preset="proxy_lagrangian")
        small = ConstrainedOptimizer(_groups_problem(SWAP_REGRET_MAX_ROWS),
                                     torch.optim.SGD(model.parameters(), lr=0.1))
    assert named.preset.name == "proxy_lagrangian" and named.preset_note is None
    assert small.preset.name == "proxy_lagrangian" and small.preset_note is None
