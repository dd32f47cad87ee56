"""ConstrainedOptimizer.capture: a recorded (and compiled) step replays the eager step."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.game import capture as capture_module
from fairgames.game.capture import CaptureWarning
from fairgames.game.sparse import RowMatrix, recordable_products
from fairgames.rates import group, true_positive_rate

FEATURES, ROWS = 6, 96


def _problem(denominator: str = "batch") -> Problem:
    tpr = lambda v: true_positive_rate(group("g", v))  # noqa: E731
    bce = lambda s, b: F.binary_cross_entropy_with_logits(s, b.labels)  # noqa: E731
    return Problem(None, [tpr(v) >= true_positive_rate() - 0.02 for v in "abc"], loss=bce,
                   group_values={"g": list("abc")},
                   evaluator_options={"denominator": denominator})


def _data(seed: int = 0, device: str = "cpu"):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(ROWS, FEATURES, generator=gen)
    y = (x[:, 0] + 0.5 * torch.randn(ROWS, generator=gen) > 0).float()
    g = torch.randint(0, 3, (ROWS,), generator=gen)
    return x.to(device), y.to(device), g.to(device)


def _model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "linear":
        return torch.nn.Linear(FEATURES, 1)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 1))


def _game(kind: str, data, *, denominator: str = "batch", device: str = "cpu",
          opt=lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.5)):
    model = _model(kind).to(device)
    copt = ConstrainedOptimizer(_problem(denominator), opt(model.parameters()))
    x, y, g = data

    def step() -> torch.Tensor:
        copt.zero_grad()
        loss = copt.lagrangian(copt.batch(model(x)[:, 0], y, groups={"g": g}))
        loss.backward()
        copt.step()
        return loss.detach()

    return model, copt, step


def _state(model: torch.nn.Module, copt: ConstrainedOptimizer) -> torch.Tensor:
    omega, lam = copt.weights()
    return torch.cat([*(p.detach().flatten() for p in model.parameters()), omega.reshape(1),
                      lam, copt.evaluator.running_average.float()]).double()


def _compare(kind: str, steps: int, *, compile: bool, denominator: str = "batch",
             device: str = "cpu", opt=None) -> float:
    """Largest difference of θ, ω, λ and the running estimates between an eager game and a
    captured one after ``steps`` steps (3 eager warm-up steps each first)."""
    kw = {} if opt is None else {"opt": opt}
    data = _data(device=device)
    eager_model, eager, eager_step = _game(kind, data, denominator=denominator,
                                           device=device, **kw)
    model, copt, step = _game(kind, data, denominator=denominator, device=device, **kw)
    for _ in range(3):
        eager_step()
        step()
    captured = copt.capture(step, compile=compile)      # plays one step
    eager_step()
    losses = []
    for _ in range(steps - 1):
        losses.append((eager_step() - captured()).abs().item())
    assert copt.steps == eager.steps == steps + 3
    assert copt.last is not None and copt.last.step == steps + 2
    diff = (_state(eager_model, eager) - _state(model, copt)).abs().max().item()
    return max(diff, *losses)


def test_recorded_step_replays_eager_bit_for_bit_with_running_denominators() -> None:
    # The running estimates' bias correction changes every step: a recorded host float
    # (before it read the device buffer) would replay the first step's correction.
    assert _compare("linear", 100, compile=False, denominator="running") == 0.0




def test_fused_adam_keeps_its_step_count_on_the_device_and_replays_bit_for_bit() -> None:
    # Adam's non-fused CPU step reads its step count on the host (refused below); the fused
    # kernel reads the device tensor, so the bias correction advances on every replay.
    fused = lambda p: torch.optim.Adam(p, lr=0.01, fused=True)  # noqa: E731
    assert _compare("mlp", 100, compile=False, opt=fused) == 0.0


def test_capture_refuses_what_it_cannot_replay() -> None:
    model, copt, step = _game("linear", _data(),
                              opt=lambda p: torch.optim.Adam(p, lr=0.01))
    with pytest.raises(ValueError, match="capturable=True.*SGD"):
        copt.capture(step, compile=False)
    strict = ConstrainedOptimizer(_problem(), torch.optim.SGD(model.parameters(), lr=0.1),
                                  strict=True)
    with pytest.raises(ValueError, match="strict=True"):
        strict.capture(step, compile=False)


def test_sparse_constraint_rows_are_recorded_as_index_adds(monkeypatch) -> None:
    # rows stored as CSR (as from K ≈ 512 on): the recorded step multiplies by gathers and
    # index_adds of the same entries, the eager one by CSR mat-vecs — equal up to the
    # summation order over 100 steps
    monkeypatch.setattr("fairgames.game.sparse.SPARSE_ENTRIES", 1)
    _, copt, _ = _game("linear", _data())
    assert any(isinstance(m, RowMatrix) and m.sparse for m in copt.terms.modules())
    assert _compare("linear", 100, compile=False) <= 1e-6


def test_recorded_sparse_products_are_the_csr_products() -> None:
    gen = torch.Generator().manual_seed(0)
    dense = torch.randn(40, 300, generator=gen) * (torch.rand(40, 300, generator=gen) < 0.05)
    rows = [{j: float(v) for j, v in enumerate(r.tolist()) if v} for r in dense]
    m = RowMatrix(rows, 300, sparse=True)
    x, lam = torch.randn(300, generator=gen), torch.randn(40, generator=gen)
    with recordable_products():
        recorded = (m.mv(x), m.t().mv(lam), m.positive().mv(x), m.negative().mv(x))
    eager = (m.mv(x), m.t().mv(lam), m.positive().mv(x), m.negative().mv(x))
    reference = (dense @ x, dense.t() @ lam, dense.clamp_min(0) @ x, dense.clamp_max(0) @ x)
    for a, b, ref in zip(recorded, eager, reference, strict=True):
        torch.testing.assert_close(a, ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(b, ref, rtol=1e-5, atol=1e-5)


def test_new_batches_copied_into_the_captured_tensors() -> None:
    mine, theirs = _data(), _data()
    eager_model, eager, eager_step = _game("linear", theirs)
    model, copt, step = _game("linear", mine)
    captured = copt.capture(step, compile=False)    # an eager step, then the recorded one
    eager_step()
    eager_step()
    for seed in range(1, 20):
        for dst, src in zip((*mine, *theirs), 2 * _data(seed), strict=True):
            dst.copy_(src)       # labels and groups too: the layout is recomputed
        assert torch.equal(eager_step(), captured())
    assert torch.equal(_state(eager_model, eager), _state(model, copt))


def test_a_changed_learning_rate_records_the_step_again() -> None:
    data = _data()
    eager_model, eager, eager_step = _game("linear", data)
    model, copt, step = _game("linear", data)
    captured = copt.capture(step, compile=False)
    eager_step()
    eager_step()
    for i in range(10):
        if i == 5:
            for opt in (eager.model_optimizer, copt.model_optimizer):
                opt.param_groups[0]["lr"] = 0.01
        eager_step()
        captured()
    assert torch.equal(_state(eager_model, eager), _state(model, copt))


def test_without_a_compiler_the_step_is_replayed_and_says_so(monkeypatch) -> None:
    monkeypatch.setattr(capture_module, "cxx_compiler", lambda: None)
    _, copt, step = _game("linear", _data())
    with pytest.warns(CaptureWarning, match="no C\\+\\+ compiler"):
        captured = copt.capture(step)
    assert not captured.compiled
    captured()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["linear", "mlp"])
def test_compiled_cpu_step_equals_eager(kind: str) -> None:
    if capture_module.cxx_compiler() is None:
        pytest.fail("no C++ compiler for inductor on this machine")
    assert _compare(kind, 100, compile=True) <= 1e-6


@pytest.mark.slow
def test_compiled_cpu_step_with_sparse_constraint_rows_equals_eager(monkeypatch) -> None:
    if capture_module.cxx_compiler() is None:
        pytest.fail("no C++ compiler for inductor on this machine")
    monkeypatch.setattr("fairgames.game.sparse.SPARSE_ENTRIES", 1)
    assert _compare("mlp", 100, compile=True) <= 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("name", ["Adam", "AdamW", "Adagrad"])
def test_compiled_cpu_step_with_a_fused_optimizer_equals_eager(name: str) -> None:
    # inductor compiles the fused kernels as plain ops (fairgames.game.fused_steps)
    if capture_module.cxx_compiler() is None:
        pytest.fail("no C++ compiler for inductor on this machine")
    opt = lambda p: getattr(torch.optim, name)(p, lr=0.01, weight_decay=0.01,  # noqa: E731
                                               fused=True)
    assert _compare("linear", 100, compile=True, opt=opt) <= 1e-6


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["linear", "mlp"])
def test_cuda_graph_step_equals_eager(kind: str) -> None:
    assert _compare(kind, 100, compile=True, device="cuda") <= 1e-6


@pytest.mark.gpu
def test_cuda_graph_step_with_sparse_constraint_rows_equals_eager(monkeypatch) -> None:
    monkeypatch.setattr("fairgames.game.sparse.SPARSE_ENTRIES", 1)
    assert _compare("mlp", 100, compile=True, device="cuda") <= 1e-6


@pytest.mark.gpu
def test_cuda_graph_step_with_capturable_adam() -> None:
    adam = lambda p: torch.optim.Adam(p, lr=0.01, capturable=True)  # noqa: E731
    assert _compare("mlp", 100, compile=True, device="cuda", opt=adam) <= 1e-6
