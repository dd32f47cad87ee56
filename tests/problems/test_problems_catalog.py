"""The problem catalog (configs/problem/*.yaml): every entry compiles against real group
names, is playable by the game, and computes what its comment says (checked with sklearn and
numpy on a batch)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score, precision_score

from fairgames import rates as R
from fairgames.game import Problem
from fairgames.problems import (
    ProblemError,
    ProblemSpec,
    ProblemSyntaxError,
    available_problems,
    load_problem,
)

GROUPS = {"sex": ["Male", "Female"]}
COUNTS = {"Male": 700, "Female": 300}
REQUIRED = {"error", "gmean", "hmean", "qmean", "fmeasure", "kld", "kld_error",
            "fmeasure_parity", "predictive_parity", "demographic_parity", "equal_opportunity",
            "neyman_pearson", "churn"}


def _batch(seed: int = 0, n: int = 600):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(n, generator=g)
    labels = (torch.rand(n, generator=g) < 0.4).float()
    sex = (torch.rand(n, generator=g) < 0.3).long()
    base = torch.randn(n, generator=g)
    batch = R.Batch(scores=scores, labels=labels, groups={"sex": sex}, group_values=GROUPS,
                    baseline_scores=base)
    arrays = {"p": (scores > 0).numpy().astype(int), "y": labels.numpy().astype(int),
              "f": sex.numpy() == 1, "b": (base > 0).numpy().astype(int)}
    return batch, arrays


def _built(name: str, **values):
    return load_problem(name).build("sex", GROUPS, values or None, COUNTS)


def test_catalog_has_every_required_problem():
    assert REQUIRED <= set(available_problems())


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_each_problem_compiles_and_the_game_accepts_it(name):
    spec = load_problem(name)
    assert spec.tolerance_kind in ("difference", "ratio", "bound", "none")
    assert (spec.tolerance is None) == (spec.tolerance_kind == "none")
    values = {f"unconstrained_{m}": 0.2 for m in spec.unconstrained_metrics()}
    built = spec.build("sex", GROUPS, values, COUNTS)
    assert built.objective.depends_on_model
    problem = Problem(built.objective, built.constraints)
    assert problem.constraint_names == [c.name for c in built.constraints]
    batch, _ = _batch()
    ev = problem.make_evaluator()
    obj, cons = problem.true_values(ev.evaluate_split([batch]).true)
    assert math.isfinite(float(obj)) and cons.shape == (len(built.constraints),)


def test_fmeasure_parity_is_paper_000_table_4():
    built = _built("fmeasure_parity")
    assert built.variables["protected_group"] == "Female"      # the least frequent value
    assert built.variables["tolerance"] == 0.02
    batch, a = _batch(1)
    values = R.RateEvaluator([built.objective, *built.constraints]).evaluate_split([batch])
    f1_all = f1_score(a["y"], a["p"])
    assert float(built.objective.evaluate(values)) == pytest.approx(1 - f1_all)
    (c,) = built.constraints
    f, other = a["f"], ~a["f"]
    expected = f1_score(a["y"][other], a["p"][other]) - f1_score(a["y"][f], a["p"][f]) - 0.02
    assert float(c.value(values)) == pytest.approx(expected)


def test_protected_group_override_by_code_or_name():
    spec = load_problem("fmeasure_parity")
    for value in ("Male", 0):
        built = ProblemSpec(**{**spec.__dict__, "protected_group": value}).build(
            "sex", GROUPS, None, COUNTS)
        assert built.constraints[0].expression.key() == (
            R.fmeasure(~R.group("sex", "Male")) - R.fmeasure(R.group("sex", "Male"))
            - 0.02).key()


@pytest.mark.parametrize("name, tolerance, refused, allowed", [
    ("equal_opportunity", 1.5, True, r"must lie in \[0, 1\)"),
    ("equal_opportunity", 1.0, True, r"must lie in \[0, 1\)"),    # vacuous: rates differ < 1
    ("equal_opportunity", -0.01, True, r"must lie in \[0, 1\)"),
    ("equal_opportunity", 0.99, False, ""),
    ("equal_opportunity", 0.0, False, ""),
    ("kld_error", 0.0, True, "must be > 0"),
    ("kld_error", 5.0, False, ""),
    ("neyman_pearson", 1.01, True, r"must lie in \[0, 1\]"),
    ("neyman_pearson", 1.0, False, ""),
])
def test_tolerance_bounds_per_kind_name_the_constraint(name, tolerance, refused, allowed):
    spec = load_problem(name)
    (constraint,) = spec.constraints            # each of these problems has one statement
    if not refused:
        ProblemSpec(**{**spec.__dict__, "tolerance": tolerance})
        return
    with pytest.raises(ProblemError) as info:
        ProblemSpec(**{**spec.__dict__, "tolerance": tolerance})
    msg = str(info.value)
    assert f"problem {name!r}, constraint {constraint!r} " in msg
    assert f"(tolerance_kind={spec.tolerance_kind})" in msg
    assert msg.endswith(f"got {tolerance}") and re.search(allowed, msg)


def test_a_protected_group_no_statement_reads_is_an_error():
    spec = load_problem("equal_opportunity")      # every group, not one protected group
    with pytest.raises(ProblemError, match=r"protected_group='Female' is set but no statement "
                                           r"reads protected_group .*\['tpr'\]"):
        ProblemSpec(**{**spec.__dict__, "protected_group": "Female"})
    # the problems that read it take it
    ProblemSpec(**{**load_problem("fmeasure_parity").__dict__, "protected_group": "Female"})


def test_kld_objectives_and_the_error_bound():
    batch, a = _batch(2)
    y, p, f = a["y"], a["p"], a["f"]
    base = y.mean()

    def kl(q):
        return base * math.log(base / q) + (1 - base) * math.log((1 - base) / (1 - q))

    expected = kl(p[~f].mean()) + kl(p[f].mean())
    for name in ("kld", "kld_error"):
        built = _built(name, unconstrained_error=0.3)
        values = R.RateEvaluator([built.objective, *built.constraints]).evaluate_split([batch])
        assert float(built.objective.evaluate(values)) == pytest.approx(expected)
    (bound,) = built.constraints
    assert float(bound.value(values)) == pytest.approx((p != y).mean() - 1.1 * 0.3)
    with pytest.raises(ProblemError, match="unconstrained_error"):
        load_problem("kld_error").build("sex", GROUPS, None, COUNTS)


def test_parities_rates_and_churn():
    batch, a = _batch(3)
    y, p, f, b = a["y"], a["p"], a["f"], a["b"]
    pp = _built("predictive_parity")
    values = R.RateEvaluator(pp.constraints).evaluate_split([batch])
    by_name = {c.name: float(c.value(values)) for c in pp.constraints}
    prec = precision_score(y, p)
    assert by_name["precision_low[Female]"] == pytest.approx(prec - precision_score(
        y[f], p[f]) - 0.05)
    assert by_name["precision_high[Male]"] == pytest.approx(precision_score(
        y[~f], p[~f]) - prec - 0.05)
    dp = _built("demographic_parity")
    values = R.RateEvaluator(dp.constraints).evaluate_split([batch])
    assert {c.name: float(c.value(values)) for c in dp.constraints}["ppr_low[Female]"] == \
        pytest.approx(p.mean() - p[f].mean() - 0.05)
    np_ = _built("neyman_pearson")
    values = R.RateEvaluator([np_.objective, *np_.constraints]).evaluate_split([batch])
    assert float(np_.objective.evaluate(values)) == pytest.approx(1 - p[y == 1].mean())
    assert float(np_.constraints[0].value(values)) == pytest.approx(p[y == 0].mean() - 0.1)
    churn = _built("churn")
    assert load_problem("churn").needs_baseline()
    values = R.RateEvaluator(churn.constraints).evaluate_split([batch])
    assert float(churn.constraints[0].value(values)) == pytest.approx((p != b).mean() - 0.05)


def test_p1_metrics_are_the_paper_000_losses():
    batch, a = _batch(4)
    y, p = a["y"], a["p"]
    tpr, tnr = p[y == 1].mean(), 1 - p[y == 0].mean()
    fnr, fpr = 1 - tpr, 1 - tnr
    refs = {"gmean": 1 - math.sqrt(tpr * tnr), "hmean": 1 - 2 / (1 / tpr + 1 / tnr),
            "qmean": math.sqrt((fpr ** 2 + fnr ** 2) / 2), "fmeasure": 1 - f1_score(y, p),
            "error": np.mean(p != y)}
    for name, ref in refs.items():
        built = _built(name)
        values = R.RateEvaluator([built.objective]).evaluate_split([batch])
        assert float(built.objective.evaluate(values)) == pytest.approx(ref), name


def test_spec_errors_are_clear(tmp_path):
    with pytest.raises(ProblemError,
                       match=r"unknown problem 'fairnes'.*\['bounded_group_loss', 'churn'"):
        load_problem("fairnes")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nobjective: error()\nconstrains: {}\n")
    with pytest.raises(ProblemError, match=r"unknown key\(s\) \['constrains'\]"):
        load_problem(bad)
    with pytest.raises(ProblemError, match="tolerance_kind"):
        ProblemSpec("x", "error()", tolerance_kind="percent")
    with pytest.raises(ProblemError, match="may not redefine"):
        ProblemSpec("x", "error()", variables={"tolerance": 1})
    with pytest.raises(ProblemError, match="names no metric"):
        ProblemSpec("x", "error()", {"c": "error() <= unconstrained_fairness"}
                    ).unconstrained_metrics()
    with pytest.raises(ProblemError, match="two constraints are named"):
        ProblemSpec("x", "error()", {"c": "for g in groups: ppr(group=g) <= 0.5",
                                     "c[Male]": "ppr() <= 0.9"}).build("sex", GROUPS)
    with pytest.raises(ProblemError, match="'race' is not in the data"):
        load_problem("equal_opportunity").build("race", GROUPS)
    with pytest.raises(ProblemSyntaxError, match="in constraint 'tpr'") as info:
        ProblemSpec("x", "error()", {"tpr": "tpr(group=3) >= 0.5"}).build("sex", GROUPS)
    assert info.value.position == len("tpr(group=")
    lst = ProblemSpec("x", "error()", ["ppr() <= 0.5", "error() <= 0.3"]).build("sex", GROUPS)
    assert [c.name for c in lst.constraints] == ["c0", "c1"]


def test_the_reduction_games_a_problem_names_are_the_reductions_constraints():
    """problems and game do not import each other: the one list is held equal here."""
    from fairgames.fair_regression.reduction import CONSTRAINTS
    from fairgames.problems.spec import REDUCTION_GAMES

    assert [g for g in REDUCTION_GAMES if g is not None] == list(CONSTRAINTS)


def _worst_group_losses(x: np.ndarray, y: np.ndarray, codes: np.ndarray) -> tuple[float, float]:
    """Least squares on Crime with an intercept, predictions clipped to [0, 1], ½(y − f)²:
    (the unconstrained fit's worst group loss, the smallest worst group loss over group
    re-weightings — the max-min value of two groups, scanned)."""
    design = np.c_[x, np.ones(len(y))]
    worst = []
    for share in np.r_[np.linspace(0, 1, 101), (codes == 0).mean()]:
        w = np.where(codes == 0, share / (codes == 0).sum(), (1 - share) / (codes == 1).sum())
        beta = np.linalg.lstsq(design * np.sqrt(w)[:, None], y * np.sqrt(w), rcond=None)[0]
        loss = 0.5 * (y - np.clip(design @ beta, 0, 1)) ** 2
        worst.append(max(loss[codes == a].mean() for a in (0, 1)))
    return worst[-1], min(worst)


def test_bounded_group_loss_default_binds_on_crime_and_stays_feasible():
    # 0.02 sat above Crime's unconstrained group losses: the default run was unconstrained.
    # The default must lie between the max-min worst group loss (below it nothing is feasible)
    # and the unconstrained fit's worst group loss (above it the constraint is slack).
    from fairgames.data import load

    train = load("crime", paper="003").train
    unconstrained, maxmin = _worst_group_losses(
        train.features.double().numpy(), train.labels.double().numpy(),
        train.groups["majority_white"].numpy())
    tolerance = load_problem("bounded_group_loss").tolerance
    assert maxmin + 0.001 < tolerance < unconstrained - 0.001
