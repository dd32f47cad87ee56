"""trainer.compile=true: the command line's step recorded and replayed equals the eager run."""

from __future__ import annotations

import pytest
import torch
from trees import numbers

from fairgames.data import make_synthetic
from fairgames.game import capture as capture_module
from fairgames.game.capture import CaptureWarning
from fairgames.train import ConfigError, fit, validate

STEPS = ("problem=equal_opportunity", "trainer.steps=100", "trainer.tensorboard=false",
         "trainer.checkpoint_every=0", "trainer.bootstrap=0")


def _differences(a, b) -> dict[str, float]:
    """θ's, λ's and the results' largest differences between two runs."""
    theta = max((t1 - t2).abs().max().item() for t1, t2 in zip(
        a.model.state_dict().values(), b.model.state_dict().values(), strict=True))
    lam_a, lam_b = a.results["training"]["multipliers"], b.results["training"]["multipliers"]
    assert lam_a.keys() == lam_b.keys()
    lam = max(abs(lam_a[k] - lam_b[k]) for k in lam_a)
    sa, sb = numbers(a.results["solutions"]), numbers(b.results["solutions"])
    assert sa.keys() == sb.keys() and len(sa) > 50
    figures = max(abs(sa[k] - sb[k]) for k in sa)
    return {"theta": theta, "lambda": lam, "figures": figures}


@pytest.mark.parametrize("overrides", [
    ("optimizer=adam",),                              # the default: full batch, fused Adam
    ("optimizer=sgd", "optimizer.momentum=0.5", "trainer.batch_size=256"),   # + a short batch
    ("trainer.batch_size=200", "trainer.constraint_split=holdout", "optimizer.grad_clip=1.0"),
], ids=["adam", "sgd-minibatch", "holdout-clip"])
def test_compiled_cli_run_equals_the_eager_run(train_run, monkeypatch, overrides):
    eager = train_run("eager", *STEPS, *overrides, "trainer.compile=false")
    # no C++ compiler: the recorded step is replayed op by op, and the run says so
    monkeypatch.setattr(capture_module, "cxx_compiler", lambda: None)
    with pytest.warns(CaptureWarning, match="no C\\+\\+ compiler"):
        captured = train_run("captured", *STEPS, *overrides, "trainer.compile=true")
    graphs = captured.engine.captured.graphs
    assert graphs and not any(g[2].compiled for g in graphs.values())
    if "trainer.batch_size=256" in overrides:
        assert len(graphs) == 2           # the epoch's short last batch has its own graph
    assert captured.engine.step == eager.engine.step == 100
    assert [h["step"] for h in captured.engine.history] == [
        h["step"] for h in eager.engine.history]
    for name, diff in _differences(eager, captured).items():
        assert diff <= 1e-6, (name, diff)


def test_compiled_run_stops_and_resumes_like_the_straight_run(train_run, tmp_path, same_run,
                                                              monkeypatch):
    monkeypatch.setattr(capture_module, "cxx_compiler", lambda: None)
    common = (*STEPS, "trainer.batch_size=256", "trainer.compile=true",
              "trainer.checkpoint_every=25")
    with pytest.warns(CaptureWarning):
        full = train_run("full", *common)
        stopped = train_run("stopped", *common, "trainer.stop_after=40", run_dir=tmp_path)
        assert stopped.stopped and stopped.engine.step == 40
        resumed = train_run("resumed", *common, "trainer.resume=true", run_dir=tmp_path)
    same_run(resumed, full)


@pytest.mark.parametrize(("overrides", "message"), [
    (("trainer.distributed=true",), "collective is not recorded"),
    (("algorithm=reduction",), "trainer.compile"),
    (("robust=soft_assignments_ideal",), "trainer.compile"),
])
def test_what_a_compiled_run_cannot_play_is_refused(compose_cfg, overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate(compose_cfg("data=synthetic", "trainer=smoke", "trainer.compile=true",
                             *overrides))


def test_a_game_with_sparse_constraint_rows_is_captured_too(train_run, monkeypatch):
    # every row matrix stored as CSR (as from K ≈ 512 on): recorded as gathers and index_adds
    monkeypatch.setattr("fairgames.game.sparse.SPARSE_ENTRIES", 1)
    eager = train_run("eager", *STEPS, "trainer.compile=false")
    monkeypatch.setattr(capture_module, "cxx_compiler", lambda: None)
    with pytest.warns(CaptureWarning):
        captured = train_run("captured", *STEPS, "trainer.compile=true")
    assert captured.engine.captured.graphs and captured.engine.step == 100
    for name, diff in _differences(eager, captured).items():
        assert diff <= 1e-6, (name, diff)


def test_fit_with_an_uncapturable_optimizer_names_the_remedy(monkeypatch):
    monkeypatch.setattr(capture_module, "cxx_compiler", lambda: None)
    splits = make_synthetic(n=300, d=3, seed=0)
    model = torch.nn.Linear(3, 1)
    with pytest.raises(ConfigError, match="fused=True"):
        fit(model, "demographic_parity", splits, protected="group",
            optimizer=torch.optim.Adam(model.parameters()),
            trainer={"steps": 6, "compile": True})
    with pytest.warns(CaptureWarning):        # fit's own default Adam is built fused
        result = fit(torch.nn.Linear(3, 1), "demographic_parity", splits, protected="group",
                     trainer={"steps": 6, "compile": True})
    assert result.engine.captured is not None and result.engine.step == 6


@pytest.mark.slow
def test_inductor_compiled_cli_run_equals_the_eager_run(train_run):
    if capture_module.cxx_compiler() is None:
        pytest.fail("no C++ compiler for inductor on this machine")
    eager = train_run("eager", *STEPS, "trainer.compile=false")
    compiled = train_run("compiled", *STEPS, "trainer.compile=true")
    assert all(g[2].compiled for g in compiled.engine.captured.graphs.values())
    for name, diff in _differences(eager, compiled).items():
        assert diff <= 1e-6, (name, diff)


@pytest.mark.gpu
def test_cuda_graph_cli_run_equals_the_eager_run(train_run):
    eager = train_run("eager", *STEPS, "trainer.device=cuda", "trainer.compile=false")
    compiled = train_run("compiled", *STEPS, "trainer.device=cuda", "trainer.compile=true")
    for name, diff in _differences(eager, compiled).items():
        assert diff <= 1e-6, (name, diff)
