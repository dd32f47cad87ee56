"""trainer.early_stop: the rule on hand-made checks, the incremental values against the full
evaluation, a run that stops and records it, the checkpoint round trip, config errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import torch

from fairgames.data import make_synthetic
from fairgames.rates import error_rate, fmeasure, group, true_positive_rate
from fairgames.train import ConfigError, fit, load_schema
from fairgames.train.evaluation import SolutionEvaluator
from fairgames.train.results.early_stop import Check, StopRule, TrainValues
from fairgames.train.results.recommend import choose
from fairgames.train.results.solutions import candidate_values, exact_mixture

ROOT = Path(__file__).resolve().parents[2]
# a quick synthetic equal-opportunity job that settles well before its 400 steps
QUICK = ["data=synthetic", "data.n=3000", "data.group_shift=1.5", "trainer=smoke",
         "trainer.steps=400", "trainer.log_every=20", "trainer.snapshot_every=10",
         "trainer.max_snapshots=40", "optimizer.lr=0.05", "problem=equal_opportunity",
         "trainer.early_stop.enabled=true", "trainer.early_stop.objective_tol=0.01",
         "trainer.early_stop.best_tol=0.02"]


# --------------------------------------------------------------------------- the rule
def _reference_stop(checks: list[Check], n: int, eps: float, delta: float) -> int | None:
    """The first step where the rule holds, written out with numpy over the whole list."""
    feasible = np.array([c.feasible for c in checks])
    f = np.array([c.objective for c in checks])
    it = np.array([c.iterate_objective for c in checks])
    for k in range(n - 1, len(checks)):
        w = slice(k - n + 1, k + 1)
        if (feasible[w].all() and np.ptp(f[w]) <= eps and f[k] - it[w].min() <= delta):
            return checks[k].step
    return None


def _first_stop(rule: StopRule, checks: list[Check]) -> int | None:
    for k in range(len(checks)):
        cert = rule.certify(checks[: k + 1])
        if cert is not None:
            return cert["step"]
    return None


def test_the_rule_stops_exactly_where_the_window_first_settles():
    rule = StopRule(patience=3, objective_tol=0.002, best_tol=0.005)
    rows = [  # (feasible, recommendation's objective, iterate's objective)
        (False, 0.30, 0.25), (True, 0.24, 0.20),   # the flat start: far above the iterates
        (True, 0.24, 0.19), (True, 0.24, 0.18),    # settled, but 0.06 above the iterates
        (True, 0.16, 0.158), (True, 0.159, 0.157), (False, 0.158, 0.156),  # infeasible
        (True, 0.158, 0.157), (True, 0.1585, 0.158),
        (True, 0.1575, 0.156),                     # first window of 3 that passes: step 250
        (True, 0.1575, 0.156)]
    checks = [Check(25 * (i + 1), *r) for i, r in enumerate(rows)]
    assert _first_stop(rule, checks) == 250
    assert _reference_stop(checks, 3, 0.002, 0.005) == 250
    cert = rule.certify(checks[:10])
    assert cert["window"] == [200, 225, 250]
    assert cert["objective_moved"] == pytest.approx(0.001)
    assert cert["above_best_iterate"] == pytest.approx(0.0015)


@pytest.mark.parametrize("seed", range(20))
def test_the_rule_matches_its_reference_and_never_stops_on_an_infeasible_check(seed):
    rng = np.random.default_rng(seed)
    n, eps, delta = int(rng.integers(1, 5)), 0.01, 0.01
    f = 0.2 + np.cumsum(rng.normal(0, 0.004, 40))
    checks = [Check(10 * (i + 1), bool(rng.random() < 0.8), float(f[i]),
                    float(f[i] - abs(rng.normal(0, 0.008)))) for i in range(40)]
    rule = StopRule(n, eps, delta)
    assert _first_stop(rule, checks) == _reference_stop(checks, n, eps, delta)
    for k in range(len(checks)):
        if not checks[k].feasible:
            assert rule.certify(checks[: k + 1]) is None


def test_an_undefined_objective_never_certifies():
    rule = StopRule(patience=1, objective_tol=1.0, best_tol=1.0)
    assert rule.certify([Check(10, True, math.inf, 0.1)]) is None


# --------------------------------------------------------------------------- incremental values
@pytest.fixture(scope="module")
def split():
    return make_synthetic(n=2000, d=4, seed=3).train


def _evaluator(kind: str) -> SolutionEvaluator:
    tpr = lambda g: true_positive_rate(group("group", g))  # noqa: E731
    if kind == "rates":
        return SolutionEvaluator(error_rate(), [(tpr("1") >= tpr("0") - 0.05).named("eo"),
                                                (error_rate() <= 0.4).named("e")], "group")
    # a ratio objective: a mixture's value is a ratio of mixed counts
    return SolutionEvaluator(1.0 - fmeasure(), [(tpr("0") >= 0.5).named("t")], "group")


def _numpy_rates(split, p: np.ndarray) -> dict[str, float]:
    """Error, per-group TPR and F1 of expected predictions ``p`` in numpy."""
    y = split.labels.numpy()
    g = split.groups["group"].numpy()
    tp = float((p * y).sum())
    return {"error": float(np.mean(np.where(y == 1, 1 - p, p))),
            "tpr0": float(p[(y == 1) & (g == 0)].mean()),
            "tpr1": float(p[(y == 1) & (g == 1)].mean()),
            "f1": 2 * tp / (float(p.sum()) + float(y.sum()))}


@pytest.mark.parametrize("kind", ["rates", "ratio"])
def test_counted_values_equal_the_full_evaluation(split, kind):
    ev = _evaluator(kind)
    s = torch.randn(6, len(split), generator=torch.Generator().manual_seed(1))
    counts = ev.counts_each(split, s)
    assert counts is not None
    each = ev.statements_of_counts(counts)
    assert each == [ev.statements(split, row) for row in s]      # bit for bit
    q = torch.tensor([0.125, 0.0, 0.375, 0.25, 0.0, 0.25])   # float32 (a run's), sum 1
    mixed = ev.statements_of_counts(counts, q)[0]
    full = ev.statements(split, s, mixture_weights=q)
    assert mixed["objective"] == pytest.approx(full["objective"], abs=1e-12)
    for name, c in full["constraints"].items():
        assert mixed["constraints"][name]["value"] == pytest.approx(c["value"], abs=1e-12)
    # and against numpy on the mixture's expected prediction
    p = (q.double().numpy()[:, None] * (s.numpy() > 0)).sum(0)
    ref = _numpy_rates(split, p)
    if kind == "rates":
        assert mixed["objective"] == pytest.approx(ref["error"], abs=1e-12)
        assert mixed["constraints"]["eo"]["value"] == pytest.approx(
            ref["tpr0"] - ref["tpr1"] - 0.05, abs=1e-12)
    else:
        assert mixed["objective"] == pytest.approx(1 - ref["f1"], abs=1e-12)


def test_counts_are_refused_where_they_are_not_exact(split):
    ev = _evaluator("rates")
    s = torch.randn(2, len(split))
    s[0, 0] = float("nan")
    assert ev.counts_each(split, s) is None


@pytest.mark.parametrize("kind", ["rates", "ratio"])
def test_the_incremental_recommendation_is_the_full_ones(split, kind):
    """Candidates added in three batches give the recommendation that the run's own path
    (candidate_values, exact_mixture, choose) gives on all of them at once."""
    ev = _evaluator(kind)
    g = torch.Generator().manual_seed(5)
    s = torch.randn(9, len(split), generator=g) + torch.linspace(-1.5, 1.5, 9)[:, None]
    values = TrainValues(ev, split, None)
    keys = [("snapshot", 10 * i) for i in range(9)]
    for part in (slice(0, 3), slice(3, 7), slice(7, 9)):
        values.add(keys[part], s[part])
    feasible, objective = values.recommend(keys)
    objectives, rows = candidate_values(ev, split, s, None)
    c = choose(objectives, rows, exact_mixture(ev, split, s, None))
    f, g_rows = exact_mixture(ev, split, s, None)(c.weights)
    assert feasible == (max(g_rows) <= 0.0)
    assert objective == pytest.approx(f, abs=1e-9)
    values.forget(keys[4:])
    assert sorted(values.values) == sorted(keys[4:])


def test_no_defined_candidate_is_not_feasible(split):
    """KLD of a model predicting nobody positive is infinite: early in a run every candidate
    may be undefined, and the check then certifies nothing (the LP has nothing to mix)."""
    from fairgames.rates import kld, positive_prediction_rate

    ev = SolutionEvaluator(kld(group("group", "1")),
                           [(positive_prediction_rate() >= 0.1).named("p")], "group")
    values = TrainValues(ev, split, None)
    values.add([0, 1], -torch.ones(2, len(split)))
    assert values.values[0][0] == math.inf
    assert values.recommend([0, 1]) == (False, math.inf)


# --------------------------------------------------------------------------- runs
def test_a_run_stops_early_and_records_why(train_run):
    res = train_run("stop", *QUICK, fast=False)
    jsonschema.validate(res.results, load_schema())
    tr = res.results["training"]
    es = tr["early_stop"]
    assert es["enabled"] and es["stopped_at"] is not None
    assert tr["steps"] == es["stopped_at"] == res.engine.step < 400
    cert = es["certificate"]
    assert cert["objective_moved"] <= 0.01 and cert["above_best_iterate"] <= 0.02
    assert len(cert["window"]) == 3 and cert["window"][-1] == es["stopped_at"]
    # the recommendation the run made at the stop is the one the check certified
    rec = res.results["solutions"]["recommended"]["train"]
    assert rec["objective"] == pytest.approx(cert["objective"], abs=1e-9)
    assert max(c["value"] for c in rec["constraints"].values()) <= 0.0
    assert res.engine.history[-1]["step"] == es["stopped_at"]


def test_off_plays_every_step(train_run):
    res = train_run("nostop", *QUICK, "trainer.early_stop.enabled=false", fast=False)
    assert res.engine.step == 400
    assert res.results["training"]["early_stop"] == {
        "enabled": False, "reason": "trainer.early_stop.enabled=false"}


def test_auto_is_off_for_another_recommendation_rule(train_run):
    res = train_run("alias", *QUICK, "trainer.early_stop.enabled=auto",
                    "trainer.recommend=final", fast=False)
    assert res.engine.step == 400
    assert "recommend=final" in res.results["training"]["early_stop"]["reason"]


def test_a_resumed_run_stops_where_the_uninterrupted_one_did(train_run, tmp_path):
    full = train_run("full", *QUICK, "trainer.checkpoint_every=1000", fast=False)
    stop = full.results["training"]["early_stop"]["stopped_at"]
    part = train_run("part", *QUICK, f"trainer.stop_after={stop - 30}", run_dir=tmp_path,
                     fast=False)
    assert part.results is None and part.engine.step == stop - 30
    resumed = train_run("resumed", *QUICK, "trainer.resume=true", run_dir=tmp_path,
                        fast=False)
    assert (resumed.results["training"]["early_stop"]
            == full.results["training"]["early_stop"])
    assert (resumed.results["solutions"]["recommended"]["test"]
            == full.results["solutions"]["recommended"]["test"])
    # a resume of the stopped run plays nothing more
    again = train_run("again", *QUICK, "trainer.resume=true", run_dir=tmp_path, fast=False)
    assert again.engine.step == stop


def test_the_command_line_says_where_it_stopped(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), *QUICK,
                          f"run_dir={tmp_path}"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300, check=True)
    res = json.loads((tmp_path / "results.json").read_text())
    step = res["training"]["early_stop"]["stopped_at"]
    assert f"stopped early at step {step} (trainer.early_stop)" in out.stdout


# --------------------------------------------------------------------------- config
@pytest.mark.parametrize(("override", "message"), [
    ({"enabled": "yes"}, r"trainer.early_stop.enabled='yes': auto, true or false"),
    ({"patience": 0}, r"trainer.early_stop.patience=0: must be positive"),
    ({"objective_tol": -0.1}, r"trainer.early_stop.objective_tol=-0.1: must be non-negative"),
    ({"best_tol": float("inf")}, r"trainer.early_stop.best_tol=inf"),
    ({"patients": 3}, r"trainer.early_stop.patients=3: unknown key"),
])
def test_bad_values_are_named(split, override, message):
    splits = make_synthetic(n=300, seed=0)
    with pytest.raises(ConfigError, match=message):
        fit(torch.nn.Linear(5, 1), "equal_opportunity", splits, protected="group",
            trainer={"steps": 2, "early_stop": {**override}})


def test_on_with_another_recommendation_rule_is_refused():
    splits = make_synthetic(n=300, seed=0)
    with pytest.raises(ConfigError, match=r"trainer.early_stop.enabled=True: the stop "
                                          r"certifies the recommendation"):
        fit(torch.nn.Linear(5, 1), "equal_opportunity", splits, protected="group",
            trainer={"steps": 2, "recommend": "final", "early_stop": {"enabled": True}})
