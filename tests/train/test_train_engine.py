"""End-to-end runs through Hydra's compose API on synthetic data: constraints met on train,
results.json against its schema and against independent numpy / sklearn recomputation from the
saved solutions, TensorBoard tags, report and plot, resume equal to an uninterrupted run, and
a training step without host-device sync."""

from __future__ import annotations

import json
import math

import jsonschema
import numpy as np
import pytest
import torch
from sklearn.metrics import recall_score
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

from fairgames.data import make_synthetic
from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.game.solutions import StochasticModel, load_solution
from fairgames.models import build_model
from fairgames.problems import load_problem
from fairgames.rates import no_host_sync
from fairgames.train import (
    BatchSettings,
    Engine,
    GameData,
    LogSettings,
    SnapshotSettings,
    load_schema,
)
from fairgames.train.data import load_splits
from fairgames.train.results.outputs import flatten, hparams_of


def _splits(result):
    cfg = result.results["config"]
    return load_splits(cfg["data"], cfg["seed"])


def _template(result):
    meta = torch.load(result.run_dir / "final.pt", weights_only=True)["metadata"]["model"]
    return build_model(name=meta["name"], input_dim=meta["input_dim"], bias=meta["bias"])


def _eo_violation(y, p, g, tol=0.05):
    """max over groups of TPR(all) − TPR(G) − tol (equal opportunity's g ≤ 0 form)."""
    overall = recall_score(y, p)
    return max(overall - recall_score(y[g == k], p[g == k]) - tol for k in np.unique(g))


# --------------------------------------------------------------------------- the contract
def test_constraints_met_on_train(eo_run, unconstrained_run):
    splits = _splits(eo_run)
    tr = splits.train
    y, g = tr.labels.numpy(), tr.groups["group"].numpy()
    # The unconstrained model violates equal opportunity clearly ...
    unc = load_solution(unconstrained_run.run_dir / "final.pt", _template(unconstrained_run))
    p_unc = (unc(tr.features) > 0).numpy()
    assert _eo_violation(y, p_unc, g) > 0.08
    # ... the constrained final model nearly meets it, the best iterate chosen on train and the
    # LP-shrunk stochastic model (linear constraints: exact for mixtures) meet it.
    sol = eo_run.results["solutions"]
    final = load_solution(eo_run.run_dir / "final.pt", _template(eo_run))
    assert _eo_violation(y, (final(tr.features) > 0).numpy(), g) <= 0.01
    best = load_solution(eo_run.run_dir / "best_iterate.pt", _template(eo_run))
    assert _eo_violation(y, (best(tr.features) > 0).numpy(), g) <= 1e-9
    mix = load_solution(eo_run.run_dir / "stochastic.pt", _template(eo_run))
    assert isinstance(mix, StochasticModel)
    assert len(mix) <= len(eo_run.results["training"]["problem"]["multiplier_rows"]) + 1
    q = mix.predict_proba(tr.features).double().numpy()
    tpr = lambda m: (q * (y == 1) * m).sum() / ((y == 1) * m).sum()  # noqa: E731
    worst = max(tpr(np.ones_like(y)) - tpr(g == k) - 0.05 for k in (0, 1))
    assert worst <= 1e-6
    assert max(c["violation"] for c in sol["stochastic"]["train"]["constraints"].values()) \
        <= 1e-6
    # The price of fairness is moderate.
    assert sol["final"]["train"]["error"] < unconstrained_run.results["solutions"]["final"][
        "train"]["error"] + 0.08


def test_results_match_the_schema_and_independent_recomputation(eo_run):
    res = json.loads((eo_run.run_dir / "results.json").read_text())
    jsonschema.validate(res, load_schema())
    assert set(res) == {"schema_version", "config", "env", "solutions", "training", "verdict"}
    assert res["config"]["problem"]["name"] == "equal_opportunity"
    # every step is played unless trainer.early_stop (off by default) certified a stop
    stopped = res["training"]["early_stop"].get("stopped_at")
    assert res["training"]["steps"] == (300 if stopped is None else stopped)
    splits = _splits(eo_run)
    template = _template(eo_run)
    for solution in ("final", "best_iterate"):
        model = load_solution(eo_run.run_dir / f"{solution}.pt", template)
        for name, ds in splits.items():
            m = res["solutions"][solution][name]
            y, g = ds.labels.numpy(), ds.groups["group"].numpy()
            p = (model(ds.features) > 0).numpy().astype(int)
            assert m["error"] == pytest.approx(np.mean(p != y), abs=1e-9)
            assert m["objective"] == pytest.approx(np.mean(p != y), abs=1e-9)
            for k, v in enumerate(ds.group_names["group"]):
                row = m["groups"][f"group={v}"]
                assert row["tpr"] == pytest.approx(recall_score(y[g == k], p[g == k]))
                assert row["count"] == (g == k).sum()
                c = m["constraints"][f"tpr[{v}]"]
                ref = recall_score(y, p) - recall_score(y[g == k], p[g == k]) - 0.05
                assert c["value"] == pytest.approx(ref, abs=1e-9)
                assert c["violation"] == pytest.approx(max(ref, 0.0), abs=1e-9)
    mix = load_solution(eo_run.run_dir / "stochastic.pt", template)
    ds = splits.test
    q = mix.predict_proba(ds.features).double().numpy()
    y = ds.labels.numpy()
    assert res["solutions"]["stochastic"]["test"]["error"] == pytest.approx(
        np.mean(q * (1 - y) + (1 - q) * y), abs=1e-6)
    assert res["training"]["stochastic"]["weights"] == pytest.approx(
        mix.weights.tolist(), abs=1e-12)
    # rates are linear in the mixture weights: the LP mixture is exact, never repaired
    assert res["training"]["stochastic"]["moved_towards_best_iterate"] is None


def test_tensorboard_has_the_expected_tags(eo_run):
    ea = EventAccumulator(str(eo_run.run_dir))
    ea.Reload()
    tags = set(ea.Tags()["scalars"])
    expected = {"objective/true", "objective/surrogate", "objective/lagrangian",
                "constraint/max_violation", "multiplier/objective_weight",
                "game/likely_infeasible", "game/empty_subsets"}
    for v in ("0", "1"):
        expected |= {f"constraint/tpr[{v}]/{k}" for k in
                     ("value", "violation", "surrogate_value", "surrogate_violation")}
        expected |= {f"multiplier/tpr[{v}]", f"groups/group={v}/tpr",
                     f"groups/group={v}/positive_rate"}
    expected |= {f"final/{s}/test/error" for s in ("final", "best_iterate", "stochastic")}
    assert expected <= tags, expected - tags
    steps = [e.step for e in ea.Scalars("objective/true")]
    assert steps == list(range(25, eo_run.engine.step + 1, 25))
    # The surrogate (hinge) bound is above the true objective at every logged step.
    true = [e.value for e in ea.Scalars("objective/true")]
    sur = [e.value for e in ea.Scalars("objective/surrogate")]
    assert all(s >= t - 1e-6 for s, t in zip(sur, true, strict=True))
    # The validation curves: at the last step the model is the final solution, whose
    # validation figures results.json has from the exact evaluation after training.
    final = eo_run.results["solutions"]["final"]["validation"]
    assert [e.step for e in ea.Scalars("validation/objective")] == steps
    assert ea.Scalars("validation/objective")[-1].value == pytest.approx(final["objective"])
    for name, c in final["constraints"].items():
        assert ea.Scalars(f"validation/constraint/{name}")[-1].value == pytest.approx(
            c["value"], abs=1e-6)
    assert ea.Scalars("validation/max_violation")[-1].value == pytest.approx(
        max(c["violation"] for c in final["constraints"].values()), abs=1e-6)
    # hparams: the settings the run used — no robust.* of a non-robust run but its name, no
    # tuning grid, no output setting, nothing unset (docs/training.md, "TensorBoard")
    start = ea.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    logged = dict(HParamsPluginData.FromString(start).session_start_info.hparams)
    config = eo_run.results["config"]
    assert set(logged) == set(hparams_of(config))
    assert [k for k in logged if k.startswith("robust.")] == ["robust.name"]
    assert not any(k.startswith("trainer.tune_grid") or k == "run_dir" for k in logged)
    assert logged["optimizer.lr"].number_value == config["optimizer"]["lr"]
    assert len(logged) < len(flatten(config)) - 30
    # One event file: the hparams and final metrics go through the run's own writer.
    assert len(list(eo_run.run_dir.glob("events.out.tfevents.*"))) == 1
    assert len(ea.Scalars("final/stochastic/test/error")) == 1


def test_every_slack_and_multiplier_is_logged(train_run):
    r = train_run("kld", "problem=kld", "algorithm=algorithm2", "trainer.steps=40",
                  "trainer.log_every=20")
    ea = EventAccumulator(str(r.run_dir))
    ea.Reload()
    slacks = r.results["training"]["slacks"]
    assert slacks
    tags = set(ea.Tags()["scalars"])
    from fairgames.train.loop.logger import clean_tag

    assert {clean_tag(f"slack/{s}") for s in slacks} <= tags
    assert {clean_tag(f"multiplier/{m}") for m in r.results["training"]["multipliers"]} <= tags


def test_report_and_dynamics_plot(eo_run):
    report = (eo_run.run_dir / "report.md").read_text()
    assert "# fairgames run: equal_opportunity on synthetic" in report
    assert "| group=1 |" in report and "`for g in groups: tpr(group=g) >= tpr() - tolerance`" \
        in report
    png = (eo_run.run_dir / "dynamics.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "## Plots\n\n![dynamics.png](dynamics.png)" in report     # shown where it renders
    history = eo_run.engine.history
    assert [h["step"] for h in history] == list(range(25, eo_run.engine.step + 1, 25))


# --------------------------------------------------------------------------- resume
@pytest.mark.parametrize("overrides", [
    # minibatches + an MLP with dropout (sampler and RNG state) + Adam, ratio slacks (P3)
    ["problem=fmeasure_parity", "model=mlp", "model.hidden=[16]", "model.dropout=0.2",
     "trainer.batch_size=256", "algorithm=algorithm3"],
    # full batch, ψ slacks (P2) and the unconstrained pre-run
    ["problem=kld_error", "algorithm=algorithm2", "trainer.snapshot_strategy=uniform_stride"],
    # the two-dataset game on minibatches: the held-out sampler's position
    ["problem=fmeasure_parity", "trainer.batch_size=256", "algorithm=algorithm3",
     "trainer.constraint_split=validation"],
], ids=["minibatch-mlp-ratio", "fullbatch-kld", "minibatch-heldout"])
def test_killed_and_resumed_run_ends_like_an_uninterrupted_one(train_run, tmp_path,
                                                               overrides, monkeypatch,
                                                               same_run):
    common = [*overrides, "trainer.steps=60", "trainer.checkpoint_every=20",
              "trainer.log_every=5", "trainer.snapshot_every=3", "trainer.max_snapshots=8"]
    full = train_run("full", *common)
    # "Kill" after step 47: the last checkpoint is step 40; nothing else is written.
    # (stop_after alone checkpoints its step: a kill saves only the periodic checkpoints.)
    periodic = Engine.save_checkpoint
    monkeypatch.setattr(Engine, "save_checkpoint",
                        lambda self: periodic(self) if self.step % 20 == 0 else None)
    killed = train_run("killed", *common, "trainer.stop_after=47", run_dir=tmp_path)
    monkeypatch.undo()
    assert killed.stopped and killed.results is None and killed.engine.step == 47
    assert not (tmp_path / "results.json").exists()
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["engine"]["step"] == 40
    assert not list(tmp_path.glob("*.tmp"))
    resumed = train_run("resumed", *common, "trainer.resume=true", run_dir=tmp_path)
    same_run(resumed, full)
    # The killed run's events after the checkpoint were purged: each step is logged once.
    ea = EventAccumulator(str(tmp_path))
    ea.Reload()
    assert [e.step for e in ea.Scalars("objective/true")] == list(range(5, 61, 5))


def test_resume_refuses_another_config(train_run, tmp_path):
    train_run("a", "problem=equal_opportunity", "trainer.steps=20", "trainer.stop_after=15",
              "trainer.checkpoint_every=10", run_dir=tmp_path)
    from fairgames.train import ConfigError

    with pytest.raises(ConfigError, match=r"problem.tolerance: 0.05 -> 0.1"):
        train_run("b", "problem=equal_opportunity", "trainer.steps=20", "problem.tolerance=0.1",
                  "trainer.resume=true", run_dir=tmp_path)


# --------------------------------------------------------------------------- helper models
def test_kld_error_trains_its_own_unconstrained_model(train_run):
    common = ["trainer.steps=80", "trainer.log_every=40"]
    kld = train_run("kld", "problem=kld_error", "algorithm=algorithm2", *common)
    unc = train_run("unc80", "problem=error", *common)
    # The pre-run is the `error` problem with the same settings: the same training error.
    values = kld.results["training"]["unconstrained"]["values"]
    assert values["unconstrained_error"] == pytest.approx(
        unc.results["solutions"]["final"]["train"]["error"], abs=1e-12)
    m = kld.results["solutions"]["final"]["train"]
    assert m["constraints"]["error_bound"]["value"] == pytest.approx(
        m["error"] - 1.1 * values["unconstrained_error"], abs=1e-9)
    base = m["groups"]["overall"]["base_rate"]
    kl = sum(base * math.log(base / m["groups"][f"group={v}"]["positive_rate"])
             + (1 - base) * math.log((1 - base) / (1 - m["groups"][f"group={v}"]
                                                    ["positive_rate"])) for v in ("0", "1"))
    assert m["objective"] == pytest.approx(kl, abs=1e-9)


def test_churn_baseline_trained_in_the_run_or_loaded(train_run, unconstrained_run):
    r = train_run("churn", "problem=churn", "trainer.steps=60", "trainer.log_every=30")
    info = r.results["training"]["baseline"]
    assert info["source"] == "trained" and info["fraction"] == 0.25
    splits = _splits(r)
    base = r.extras["baseline_model"]
    final = r.extras["solutions"]["final"]
    for name, ds in splits.items():
        with torch.no_grad():
            pb = (base(ds.features) > 0).numpy()
            pf = (final(ds.features) > 0).numpy()
        value = r.results["solutions"]["final"][name]["constraints"]["churn"]["value"]
        assert value == pytest.approx(np.mean(pb != pf) - 0.05, abs=1e-9)
    # problem.baseline_path: an earlier run's final model is the baseline.
    loaded = train_run("churn2", "problem=churn", "trainer.steps=20", "trainer.log_every=10",
                       f"problem.baseline_path={unconstrained_run.run_dir}")
    assert loaded.results["training"]["baseline"] == {"source": str(unconstrained_run.run_dir)}
    old = load_solution(unconstrained_run.run_dir / "final.pt", _template(unconstrained_run))
    new = loaded.extras["solutions"]["final"]
    ds = splits.test
    with torch.no_grad():
        ref = np.mean((old(ds.features) > 0).numpy() != (new(ds.features) > 0).numpy())
    assert loaded.results["solutions"]["final"]["test"]["constraints"]["churn"]["value"] == \
        pytest.approx(ref - 0.05, abs=1e-9)


def test_churn_baseline_of_another_width_is_refused_with_both_widths(train_run,
                                                                     unconstrained_run):
    # the baseline scores every split: a model of another input width fails in torch's
    # words ("mat1 and mat2 shapes cannot be multiplied") unless the load checks it
    from fairgames.train import ConfigError
    with pytest.raises(ConfigError, match=r"problem.baseline_path=.*takes 10 features but "
                                          r"this run's data has 7.*same data"):
        train_run("churn_width", "problem=churn", "data.d=7", "trainer.steps=20",
                  f"problem.baseline_path={unconstrained_run.run_dir}")


# --------------------------------------------------------------------------- no host sync
@pytest.mark.parametrize("batch_size, problem", [(None, "equal_opportunity"),
                                                 (128, "fmeasure_parity"),
                                                 (128, "kld")])
def test_a_training_step_makes_no_host_sync(batch_size, problem):
    splits = make_synthetic(n=1200, d=5, seed=0)
    built = load_problem(problem).build("group", splits.train.group_names, None,
                                        splits.train.group_counts("group"))
    model = torch.nn.Linear(5, 1)
    # SGD: torch's Adam reads its step counter on the host (flagged by the CPU guard).
    copt = ConstrainedOptimizer(Problem(built.objective, built.constraints),
                                torch.optim.SGD(model.parameters(), lr=0.1))
    engine = Engine(model, copt, GameData(splits.train, "group"), steps=50,
                    batches=BatchSettings(size=batch_size), logging=LogSettings(every=1000),
                    snapshots=SnapshotSettings(every=2, max_kept=4))
    engine.train_step()          # the first step compiles the evaluation plan (host work)
    with no_host_sync():
        for _ in range(12):      # crosses an epoch boundary and thins the snapshots
            engine.train_step()
    assert engine.step == 13 and len(engine.snapshots) == 4


def test_a_sparse_full_batch_trains_through_the_csr_kernels(train_run):
    """Adult's one-hot features (89 % zeros), full batch: the engine hands the model the same
    tensor every step, so ``model.sparse_inputs=auto`` (the default) multiplies it as CSR; the
    weights follow the dense run's to rounding."""
    runs = {mode: train_run(f"sparse_{mode}", "data=adult", "trainer.steps=6",
                            "trainer.bootstrap=0", f"model.sparse_inputs={mode}", fast=False)
            for mode in ("auto", "off")}
    assert runs["auto"].model._csr._pair is not None
    assert runs["off"].model._csr._pair is None
    for a, b in zip(runs["auto"].model.parameters(), runs["off"].model.parameters(),
                    strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
