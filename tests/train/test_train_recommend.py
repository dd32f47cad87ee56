"""The recommended solution (fairgames.train.results.recommend): the rule against independent
references (scipy's LP, hand-made ratio and infeasible cases), and end to end: results.json,
recommended.pt recomputed with numpy, the opt-out, the snapshot offsets and the CLI's line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import torch
from scipy.optimize import linprog

from fairgames.data import make_synthetic
from fairgames.game.solutions import StochasticModel, best_iterate, load_solution
from fairgames.train import fit, load_schema
from fairgames.train.results.recommend import HELPER_STEP, REASONS, choose
from fairgames.train.results.solutions import REPAIR_TOLERANCE

ROOT = Path(__file__).resolve().parents[2]


def _linear(f, g):
    """``exact`` of candidates whose metrics are rates (linear in the mixture weights)."""
    f, g = np.asarray(f, float), np.asarray(g, float)
    return lambda w: (float(w.numpy() @ f), list(w.numpy() @ g))


# --------------------------------------------------------------------------- the rule
@pytest.mark.parametrize("seed", range(4))
def test_rates_give_the_lp_optimum_over_mixtures(seed):
    rng = np.random.default_rng(seed)
    f = rng.uniform(0.1, 0.5, 12)
    g = np.column_stack([0.3 - 2 * f + rng.normal(0, 0.05, 12),    # lower error, more unfair
                         rng.uniform(-0.2, 0.1, 12)])
    c = choose(list(f), g.tolist(), _linear(f, g))
    # scipy's LP over the simplex, solved here independently, with the rule's margin inside
    # the bound (float32 evaluation must not read a boundary mixture as a violation)
    margin = REPAIR_TOLERANCE
    ref = linprog(f, A_ub=g.T, b_ub=np.full(2, -margin), A_eq=np.ones((1, 12)), b_eq=[1.0],
                  bounds=[(0, None)] * 12, method="highs")
    assert ref.status == 0
    w = c.weights.numpy()
    assert w @ f == pytest.approx(ref.fun, abs=1e-9)
    assert (g.T @ w).max() <= -margin + 1e-9 and abs(w.sum() - 1) < 1e-12 and w.min() >= 0
    assert len(c.support) <= 3                                     # m + 1
    # never worse than the best feasible single candidate
    feasible = g.max(axis=1) <= 0
    if feasible.any():
        assert w @ f <= f[feasible].min() + 1e-12
    assert c.solution == ("lp_mixture" if len(c.support) > 1 else "iterate")


def test_a_mixture_worse_in_truth_than_a_feasible_candidate_loses_to_it():
    """A ratio objective: the LP's linear estimate (1/3 of candidate 0, 2/3 of candidate 2:
    0.4) beats candidate 2 (0.6), but mixing costs w0·(1 − w0) in truth: 0.4 + 2/9."""
    f, g = [0.0, 1.0, 0.6], [[0.1], [-0.1], [-0.05]]

    def exact(w):
        w0, w1, w2 = w.tolist()
        return 0.6 * w2 + 1.0 * w1 + w0 * (1 - w0), [0.1 * w0 - 0.1 * w1 - 0.05 * w2]

    c = choose(f, g, exact)
    assert c.solution == "iterate" and c.support == [2]
    assert c.reason == REASONS["lp_worse"].format(f_best=0.6, f_mix=0.4 + 2 / 9)


def test_a_ratio_constraint_the_lp_misses_is_repaired_towards_the_best_candidate():
    """The constraint of a mixture is not the mix of its members' (a ratio): the LP's 50/50
    mixture violates it in truth; the rule moves it towards the feasible candidate 1."""
    f, g = [0.0, 1.0], [[0.1], [-0.1]]

    def exact(w):
        w0, w1 = w.tolist()
        return w1, [0.1 * w0 - 0.1 * w1 + 0.2 * w0 * w1]      # convex bump in the middle

    c = choose(f, g, exact)
    f_mix, rows = exact(c.weights)
    assert max(rows) <= 0.0 and c.solution == "lp_mixture"
    assert c.moved is not None and 0 < c.moved < 1
    # the best feasible point of the repair's 1/20 grid on the segment, found by brute force;
    # the segment starts at the LP's mixture, on the linear estimate's bound less the margin:
    # 0.1·w0 − 0.1·(1 − w0) = −margin
    w0 = (0.1 - REPAIR_TOLERANCE) / 0.2
    grid = [(1 - t) * torch.tensor([w0, 1 - w0], dtype=torch.float64)
            + t * torch.tensor([0.0, 1.0], dtype=torch.float64)
            for t in np.arange(1, 21) / 20]
    best = min(exact(w)[0] for w in grid if max(exact(w)[1]) <= 0.0)
    assert f_mix == pytest.approx(best)
    assert c.reason.startswith("the LP mixture of 2 candidates, moved")


def test_nothing_feasible_gives_the_rank_rules_candidate():
    f = [0.1, 0.2, 0.3, 0.4]
    g = [[0.5, 0.4], [0.3, 0.35], [0.2, 0.6], [0.9, 0.1]]    # every mixture violates row 0
    c = choose(f, g, _linear(f, np.array(g)))
    assert c.support == [best_iterate(f, g)] == [best_iterate(f, g, rule="rank")]
    # The evidence: the least largest violation over the candidates' hull, by an LP of its own
    # (min s s.t. Σ_r w_r g_rj ≤ s, w in the simplex).
    gm = np.array(g)
    r, m = gm.shape
    lp = linprog(np.r_[np.zeros(r), 1.0], A_ub=np.c_[gm.T, -np.ones(m)], b_ub=np.zeros(m),
                 A_eq=np.r_[np.ones(r), 0.0][None], b_eq=[1.0],
                 bounds=[(0, None)] * r + [(None, None)], method="highs")
    hull = float(lp.x[-1])
    assert 0.0 < hull < 0.35                      # mixing helps, but not enough
    assert c.reason == REASONS["none_feasible"].format(n=4, hull=hull, v=0.35)


def test_no_constraints_give_the_lowest_objective():
    c = choose([0.3, 0.1, 0.2], [[], [], []], lambda w: (0.0, []))
    assert c.support == [1] and c.reason == REASONS["unconstrained"]


def test_infeasible_candidates_can_mix_into_a_feasible_mixture():
    """Each candidate violates one group's constraint; their mixture meets both."""
    f, g = [0.1, 0.1, 0.5], [[0.1, -0.1], [-0.1, 0.1], [0.05, 0.05]]
    c = choose(f, g, _linear(f, np.array(g)))
    assert c.solution == "lp_mixture" and c.support == [0, 1]
    assert c.weights.tolist()[:2] == pytest.approx([0.5, 0.5])


# --------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def splits():
    return make_synthetic(n=2000, d=5, group_shift=1.5, seed=1)


@pytest.fixture(scope="module")
def eo_fit(splits, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("recommend")
    result = fit(torch.nn.Linear(5, 1), "equal_opportunity", splits, protected="group",
                 trainer={"steps": 150, "log_every": 50, "snapshot_every": 7}, seed=0,
                 run_dir=run_dir)
    return result


def _eo_values(q, y, g, tol=0.05):
    """TPR(all) − TPR(G) − tol per group, of P(ŷ = 1) = q (a mixture's expected prediction)."""
    tpr = lambda m: (q * (y == 1) * m).sum() / ((y == 1) * m).sum()  # noqa: E731
    return [tpr(np.ones_like(y)) - tpr(g == k) - tol for k in np.unique(g)]


def test_the_recommended_solution_is_recorded_saved_and_feasible_on_train(eo_fit, splits):
    res = json.loads((eo_fit.run_dir / "results.json").read_text())
    jsonschema.validate(res, load_schema())
    rec = res["training"]["recommended"]
    assert rec["rule"] == "auto" and rec["split"] == "train"
    assert sum(rec["weights"]) == pytest.approx(1.0)
    assert rec["reason"]
    solution = load_solution(eo_fit.run_dir / "recommended.pt", torch.nn.Linear(5, 1))
    assert isinstance(solution, StochasticModel) == (rec["solution"] == "lp_mixture")
    assert type(eo_fit.recommended) is type(solution)
    meta = torch.load(eo_fit.run_dir / "recommended.pt", weights_only=True)["metadata"]
    assert meta["choice"] == rec
    candidate_steps = set(res["training"]["snapshots"]["steps"]) | {150}
    assert set(rec["steps"]) <= candidate_steps
    for name, ds in splits.items():
        x, y, g = ds.features, ds.labels.numpy(), ds.groups["group"].numpy()
        with torch.no_grad():
            q = (solution.predict_proba(x).double().numpy()
                 if isinstance(solution, StochasticModel)
                 else (solution(x).squeeze(-1) > 0).double().numpy())
        m = res["solutions"]["recommended"][name]
        assert m["error"] == pytest.approx(np.mean(q * (1 - y) + (1 - q) * y), abs=1e-6)
        values = _eo_values(q, y, g)
        for k, v in enumerate(ds.group_names["group"]):
            assert m["constraints"][f"tpr[{v}]"]["value"] == pytest.approx(values[k], abs=1e-6)
        if name == "train":      # the rule's promise, checked with numpy
            assert max(values) <= 1e-6
    # the report names it first
    report = (eo_fit.run_dir / "report.md").read_text()
    assert f"**Recommended** (the solution to deploy, `recommended.pt`): {rec['solution']}" \
        in report
    table = report[report.index("| solution | split"):]
    assert table.splitlines()[2].startswith("| recommended | train |")


def test_the_opt_out_recommends_the_stochastic_model_with_fixed_snapshots(splits):
    kw = {"steps": 60, "log_every": 30, "snapshot_every": 7}
    out = fit(torch.nn.Linear(5, 1), "equal_opportunity", splits, protected="group",
              trainer={**kw, "recommend": "stochastic", "snapshot_offset": "fixed"}).results
    assert out["solutions"]["recommended"] == out["solutions"]["stochastic"]
    rec, sto = out["training"]["recommended"], out["training"]["stochastic"]
    assert rec["solution"] == "stochastic" and rec["split"] == "validation"
    assert (rec["steps"], rec["weights"]) == (sto["steps"], sto["weights"])
    assert out["training"]["snapshots"]["steps"] == list(range(7, 61, 7))
    # the default: one snapshot in each window of 7, not all at its end
    steps = fit(torch.nn.Linear(5, 1), "equal_opportunity", splits, protected="group",
                trainer=kw).results["training"]["snapshots"]["steps"]
    assert [(s - 1) // 7 for s in steps] == list(range(len(steps)))
    assert steps != list(range(7, 61, 7))


def test_a_bad_choice_is_named(splits):
    from fairgames.train import ConfigError

    with pytest.raises(ConfigError, match=r"trainer.recommend='lp'.*expected one of"):
        fit(torch.nn.Linear(5, 1), "error", splits, protected="group",
            trainer={"steps": 2, "recommend": "lp"})
    with pytest.raises(ConfigError, match=r"trainer.snapshot_offset='middle'"):
        fit(torch.nn.Linear(5, 1), "error", splits, protected="group",
            trainer={"steps": 2, "snapshot_offset": "middle"})


def test_the_command_line_reports_the_recommended_solution(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "train.py"), "data=synthetic", "data.n=1500",
         "trainer=smoke", "problem=equal_opportunity", f"run_dir={tmp_path}"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300, check=True)
    res = json.loads((tmp_path / "results.json").read_text())
    test = res["solutions"]["recommended"]["test"]
    # the summary line, then the verdict's lines
    last = next(line for line in out.stdout.splitlines() if ": recommended (" in line)
    solution = res["training"]["recommended"]["solution"]
    assert f"recommended ({solution}) on test: objective {test['objective']:.4f}" in last
    assert f"error {test['error']:.4f}" in last


def test_the_unconstrained_model_is_a_candidate_for_a_bound_relative_to_it():
    """kld_error's bound error <= 1.1 x error(unconstrained) holds for the unconstrained model
    by construction, so the recommendation may mix it in; here (seeded) the LP does, and the
    mixture meets the bound on train (recomputed from the helper's value) with a KLD no worse
    than the game's final model's where that meets it too."""
    torch.manual_seed(0)                       # the model's initial weights
    splits = make_synthetic(n=600, d=5, seed=1)
    result = fit(torch.nn.Linear(5, 1), "kld_error", splits, protected="group",
                 algorithm={"name": "proxy_lagrangian", "surrogate": "hinge"},
                 trainer={"steps": 100, "log_every": 50, "snapshot_every": 5})
    res = result.results
    record = res["training"]["recommended"]
    bound = 1.1 * res["training"]["unconstrained"]["values"]["unconstrained_error"]
    assert "unconstrained model" in record["members"]
    assert record["steps"][record["members"].index("unconstrained model")] is None
    assert sum(record["weights"]) == pytest.approx(1.0)
    rec, final = res["solutions"]["recommended"]["train"], res["solutions"]["final"]["train"]
    assert rec["error"] <= bound + 1e-6
    if final["error"] <= bound:
        assert rec["objective"] <= final["objective"] + 1e-9
    # the model returned is that mixture, the unconstrained model among its members
    assert isinstance(result.recommended, StochasticModel)
    assert HELPER_STEP in result.recommended.steps
