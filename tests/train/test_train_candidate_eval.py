"""The candidates' exact evaluation (fairgames.train.evaluation): all of a run's candidates
counted in one pass (``statements_each``) and a mixture evaluated from its expected prediction
give the values of one exact pass per model, bit for bit, and agree with numpy references."""

import math

import numpy as np
import pytest
import torch

from fairgames.data import make_synthetic
from fairgames.problems import load_problem
from fairgames.rates import NonFiniteScoresError, error_rate, positive_prediction_rate, rate
from fairgames.rates.events import score_at_least
from fairgames.rates.exact import cached_group_table
from fairgames.train.data import make_batch
from fairgames.train.evaluation import (
    SolutionEvaluator,
    _counts_suffice,
    batch_group_table,
    expected_prediction,
    statements,
)

SPLITS = make_synthetic(n=1500, d=4, n_groups=3, seed=3)
PROTECTED = "group"


def view_of(problem: str, chunk: int = 65536) -> SolutionEvaluator:
    objective, constraints = statements(load_problem(problem), SPLITS.train, PROTECTED)
    return SolutionEvaluator(objective, constraints, PROTECTED, chunk)


def candidates(r: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    n = len(SPLITS.train)
    # some all-negative and all-positive rows: ratios with an empty denominator (NaN)
    return torch.cat([torch.randn(r, n, generator=g) + torch.linspace(-2, 2, r)[:, None],
                      -torch.ones(1, n), torch.ones(1, n)])


def same(a, b) -> bool:
    """Equal dicts of floats, NaN equal to NaN (bit for bit otherwise)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return (math.isnan(a) and math.isnan(b)) if isinstance(a, float) and a != a else a == b


@pytest.mark.parametrize("problem", ["equal_opportunity", "fmeasure_parity", "kld",
                                     "demographic_parity", "predictive_parity", "churn"])
def test_all_candidates_at_once_give_each_candidates_own_values(problem):
    view, ds, s = view_of(problem), SPLITS.train, candidates(12)
    base = torch.randn(len(ds), generator=torch.Generator().manual_seed(9))
    base = base if problem == "churn" else None
    evaluator = view._view(ds)[0]
    assert _counts_suffice(evaluator, ds)                 # the one-pass path is the one tested
    each = view.statements_each(ds, s, baseline_scores=base)
    one_by_one = [view.statements(ds, row, baseline_scores=base) for row in s]
    assert len(each) == len(s)
    assert all(same(a, b) for a, b in zip(each, one_by_one, strict=True))
    # the exact evaluator on the scores themselves (surrogate bounds and all): the same bits
    names = [("objective",), *(("constraint", c.name) for c in view.constraints)]
    for row, got in zip(s, each, strict=True):
        raw = evaluator.evaluate(make_batch(ds, row, baseline_scores=base), names)
        assert same(got["objective"], raw[("objective",)])
        assert all(same(got["constraints"][c.name]["value"], raw[("constraint", c.name)])
                   for c in view.constraints)
    # ... and in chunks (the counts of several chunks added up)
    chunked = view_of(problem, chunk=200).statements_each(ds, s, baseline_scores=base)
    assert all(same(a, b) for a, b in zip(chunked, each, strict=True))


def test_the_counts_agree_with_a_numpy_reference():
    """Equal opportunity's constraints (TPR_g ≥ TPR − t) and the error, from numpy counts."""
    view, ds, s = view_of("equal_opportunity"), SPLITS.train, candidates(6, seed=1)
    spec = load_problem("equal_opportunity")
    y, g = ds.labels.numpy(), ds.groups[PROTECTED].numpy()
    for row, got in zip(s, view.statements_each(ds, s), strict=True):
        hat = (row.numpy() > 0).astype(np.float64)
        assert got["objective"] == pytest.approx(np.mean(hat != y), abs=1e-12)
        tpr = hat[y == 1].mean()
        values = sorted(c["value"] for c in got["constraints"].values())
        expected = sorted(tpr - hat[(y == 1) & (g == k)].mean() - spec.tolerance
                          for k in np.unique(g))
        assert values == pytest.approx(expected, abs=1e-12)


def test_a_mixture_is_evaluated_from_its_expected_prediction():
    view, ds, s = view_of("demographic_parity"), SPLITS.test, candidates(4, seed=2)[:, :300]
    ds = ds.subset(torch.arange(300))
    q = torch.tensor([0.1, 0.2, 0.3, 0.15, 0.05, 0.2])
    p = expected_prediction(s, q)
    reference = (q.double().numpy()[:, None] * (s.numpy() > 0)).sum(0)
    assert p is not None and np.array_equal(p.numpy(), reference)
    out = view.evaluate(ds, s, mixture_weights=q)
    y = ds.labels.numpy()
    assert out["error"] == pytest.approx(np.mean(np.where(y == 1, 1 - reference, reference)),
                                         abs=1e-12)
    assert out["groups"]["overall"]["positive_rate"] == pytest.approx(reference.mean(),
                                                                      abs=1e-12)
    # every value as the exact evaluator gives it from the members' scores, bit for bit
    evaluator, table, _ = view._view(ds)
    raw = evaluator.evaluate(make_batch(ds, s, mixture_weights=q))
    assert same(out["groups"], table.table(raw))
    assert same(out["error"], raw[("summary", "error")])
    assert all(same(out["constraints"][c.name]["value"], raw[("constraint", c.name)])
               for c in view.constraints)


def test_float32_weights_above_one_and_non_finite_scores_take_the_scores_path():
    s = torch.tensor([[1.0, -1.0, 2.0], [3.0, 1.0, -2.0], [1.0, 1.0, 1.0]])
    thirds = torch.full((3,), 1 / 3, dtype=torch.float32)      # float32 sum: above 1
    assert float(thirds.double().sum()) > 1.0
    assert expected_prediction(s, thirds) is None
    assert expected_prediction(s, torch.tensor([0.5, 0.25, 0.25])).tolist() == [1.0, 0.5, 0.75]
    bad = candidates(3)
    bad[1, 5] = float("nan")
    view, ds = view_of("equal_opportunity"), SPLITS.train
    with pytest.raises(NonFiniteScoresError):
        view.statements_each(ds, bad)
    with pytest.raises(NonFiniteScoresError):
        view.evaluate(ds, bad, mixture_weights=torch.full((len(bad),), 1 / len(bad)))


def test_a_threshold_other_than_zero_is_counted_one_model_at_a_time():
    """A metric reading P[s ≥ 0.3] is not a function of 1[s > 0]: no shortcut, same values."""
    at = rate(score_at_least(0.3))
    view = SolutionEvaluator(error_rate(), [(at <= positive_prediction_rate() + 0.1)
                                            .named("t")], PROTECTED)
    ds, s = SPLITS.train, candidates(3)
    assert not _counts_suffice(view._view(ds)[0], ds)
    each = view.statements_each(ds, s)
    for row, got in zip(s, each, strict=True):
        x = row.numpy()
        assert got["constraints"]["t"]["value"] == pytest.approx(
            np.mean(x >= 0.3) - np.mean(x > 0) - 0.1, abs=1e-12)


@pytest.mark.parametrize("decision", [0.0, 0.5])
def test_the_logged_group_table_is_the_scores_own(decision):
    """batch_group_table reads the expected prediction: the table of the scores' own pass."""
    ds, s = SPLITS.train, candidates(2, seed=4)
    q = torch.tensor([0.5, 0.3, 0.1, 0.1])
    for scores, weights in ((s[0], None), (s, q)):
        batch = make_batch(ds, scores, mixture_weights=weights)
        got = batch_group_table(batch, PROTECTED, decision)
        shifted = make_batch(ds, scores - decision, mixture_weights=weights)
        table = cached_group_table(PROTECTED, tuple(ds.group_names[PROTECTED]), "binary")
        assert same(got, table.evaluate(shifted))
        y, hit = ds.labels.numpy(), (scores - decision).numpy() > 0
        p = hit.astype(float) if weights is None else (weights.double().numpy()[:, None]
                                                       * hit).sum(0)
        assert got["overall"]["tpr"] == pytest.approx(p[y == 1].mean(), abs=1e-12)
