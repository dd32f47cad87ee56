"""Property tests over random batches: example weights with zeros and tiny values, empty
groups, extreme scores (±1e4) and ties at the threshold.

* the fused training pass equals the whole-split evaluator on every non-empty subset;
* every surrogate bound's gradient (lower and upper, every ψ / ratio metric) is finite;
* no NaN reaches a :class:`~fairgames.game.ConstrainedOptimizer` step record, and the step
  counts the batch's empty subsets (through the whole game, without a host sync).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fairgames.rates as R
from fairgames.rates import Batch, RateEvaluator, group, no_host_sync

NAMES = ["a", "b", "c"]
PROPS = settings(max_examples=25, deadline=None, derandomize=True)


def random_batch(seed: int, n: int, *, present: int, tiny: bool, extreme: bool,
                 requires_grad: bool = False) -> Batch:
    """Groups 0..present-1 only; weights in [0.2, 2) with some 0 and (``tiny``) some 1e-9;
    scores N(0, 9) with some ±1e4 (``extreme``) and some exactly 0 (a tie at the threshold)."""
    rng = np.random.default_rng(seed)
    s = rng.normal(0.0, 3.0, n)
    if extreme:
        s[rng.random(n) < 0.15] = 1e4
        s[rng.random(n) < 0.15] = -1e4
    s[rng.random(n) < 0.15] = 0.0
    w = rng.uniform(0.2, 2.0, n)
    w[rng.random(n) < 0.15] = 0.0
    if tiny:
        w[rng.random(n) < 0.3] = 1e-9
    g = rng.integers(0, present, n)
    scores = torch.tensor(s, dtype=torch.float32).requires_grad_(requires_grad)
    return Batch(scores=scores, labels=torch.tensor(rng.random(n) < 0.5, dtype=torch.float32),
                 weights=torch.tensor(w, dtype=torch.float32), groups={"g": torch.tensor(g)},
                 group_values={"g": NAMES}, baseline_scores=torch.tensor(
                     rng.normal(0.0, 1.0, n), dtype=torch.float32))


def leaf_exprs() -> list:
    out = []
    for where in [None, *(group("g", v) for v in NAMES)]:
        out += [R.true_positive_rate(where), R.false_positive_rate(where), R.error_rate(where),
                R.positive_prediction_rate(where), R.true_positive_proportion(where),
                R.false_positive_proportion(where), R.churn_rate(where), R.win_rate(where),
                *R.score_rates([0.0, 1.0], where)]
    return out


@PROPS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 64), present=st.integers(1, 3),
       tiny=st.booleans(), extreme=st.booleans())
def test_fused_pass_equals_the_whole_split_on_non_empty_subsets(seed, n, present, tiny,
                                                                extreme):
    batch = random_batch(seed, n, present=present, tiny=tiny, extreme=extreme)
    ev = RateEvaluator(leaf_exprs()).train()
    for _ in range(2):                      # fresh, then with running estimates
        v = ev(batch)
        split = ev.evaluate_split([batch], empty="nan")
        assert split.subset_weights is not None
        full = split.subset_weights > 0
        torch.testing.assert_close(v.true.double()[full], split.true[full], rtol=1e-6,
                                   atol=1e-6)
        assert int(v.empty_subsets) == int(split.empty_subsets)
        assert bool(torch.isfinite(v.true).all() & torch.isfinite(v.upper).all()
                    & torch.isfinite(v.lower).all())


def bounded_metrics() -> list:
    a, b = group("g", "a"), group("g", "b")
    return [R.gmean(), R.hmean(), R.qmean(), R.gmean(b), R.hmean(b), R.qmean(b),
            R.precision(), R.precision(b), R.fmeasure(), R.fbeta(2.0, b),
            R.predictive_parity(a, b), R.fmeasure_parity(a, b), R.win_loss_ratio(b),
            R.true_positive_rate(a) - R.true_positive_rate(b), 1.0 - R.gmean(a)]


@PROPS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 64), present=st.integers(1, 3),
       tiny=st.booleans(), extreme=st.booleans(),
       surrogate=st.sampled_from(["hinge", "logistic"]))
def test_every_bound_gradient_is_finite(seed, n, present, tiny, extreme, surrogate):
    metrics = bounded_metrics()
    ev = RateEvaluator(metrics, surrogate=surrogate).train()
    batch = random_batch(seed, n, present=present, tiny=tiny, extreme=extreme,
                         requires_grad=True)
    v = ev(batch)
    for m in metrics:
        for which in ("lower", "upper"):
            value = m.evaluate(v, which)
            assert bool(torch.isfinite(value)), (str(m), which)
            (grad,) = torch.autograd.grad(value, batch.scores, retain_graph=True,
                                          allow_unused=True, materialize_grads=True)
            assert bool(torch.isfinite(grad).all()), (str(m), which)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), present=st.integers(1, 3), tiny=st.booleans(),
       extreme=st.booleans())
def test_no_nan_in_a_step_record(seed, present, tiny, extreme):
    from fairgames.game import ConstrainedOptimizer, Problem

    a, b = group("g", "a"), group("g", "b")
    problem = Problem(1.0 - R.gmean(), [
        (R.true_positive_rate(a) - R.true_positive_rate(b) <= 0.05).named("tpr"),
        (R.fmeasure(b) - R.fmeasure(a) <= 0.05).named("f1"),
        (R.precision(b) >= 0.2).named("precision")])
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), 0.1))
    for t in range(4):
        batch = random_batch(seed + t, 24, present=present if t else 3, tiny=tiny,
                             extreme=extreme)
        x = torch.stack([batch.scores, batch.labels, batch.weights], 1)
        fields = {"labels": batch.labels, "weights": batch.weights, "groups": batch.groups,
                  "group_values": batch.group_values}
        if t == 3:      # the later steps make no host sync, empty groups included
            with no_host_sync():
                copt.step_batch(model, x, **fields)
        else:
            copt.step_batch(model, x, **fields)
        rec = copt.last.to_host()
        values = [v for x in rec.values() for v in (x if isinstance(x, list) else [x])]
        assert all(math.isfinite(v) for v in values), rec
        # the count is the whole-split evaluator's on the same rows (weights and groups)
        split = copt.evaluator.evaluate_split([Batch(scores=batch.scores, **fields)],
                                              empty="nan")
        assert rec["empty_subsets"] == float(split.empty_subsets)
        if t and present == 1:     # "b" absent: its subsets b and b & y = 1 are empty
            assert rec["empty_subsets"] == 2
