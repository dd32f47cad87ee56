"""The bootstrap intervals (``fairgames.rates.bootstrap``) against independent references: a
plain numpy loop that materialises every resampled data set (rows repeated by their draw
counts) and recomputes TPRs and F-measures from scratch, numpy's quantiles, the multinomial's
moments, and the coverage of the intervals on synthetic data whose true values are known."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fairgames.rates import (
    Batch,
    Bootstrap,
    ExactEvaluator,
    RatesError,
    fmeasure,
    group,
    multinomial_counts,
    percentile_interval,
    stratum_codes,
    true_positive_rate,
)

GROUPS = ["a", "b", "c"]
A, B = group("g", "a"), group("g", "b")
METRICS = {
    "tpr_gap": true_positive_rate(A) - true_positive_rate(B),
    # F-measure parity, a difference of ratios: F1(a) >= F1(not a) - 0.02
    "f1_parity": (fmeasure(A) >= fmeasure(~A) - 0.02),
}


def _data(seed: int, n: int):
    rng = np.random.default_rng(seed)
    g = rng.integers(0, len(GROUPS), n)
    y = (rng.random(n) < 0.3 + 0.2 * (g == 1)).astype(np.float64)
    scores = rng.normal(size=(3, n)) + 1.2 * y - 0.4       # three members of a mixture
    q = np.array([0.5, 0.3, 0.2])
    return g, y, scores, q


def _batches(g, y, scores, q):
    common = {"labels": torch.tensor(y, dtype=torch.float32),
              "groups": {"g": torch.tensor(g)}, "group_values": {"g": GROUPS}}
    single = Batch(scores=torch.tensor(scores[0], dtype=torch.float32), **common)
    mixture = Batch(scores=torch.tensor(scores, dtype=torch.float32),
                    mixture_weights=torch.tensor(q, dtype=torch.float32), **common)
    return single, mixture


def _numpy_metrics(g, y, p):
    """TPR gap and F1 parity of soft predictions ``p`` (P(ŷ = 1) per row), from scratch."""
    def tpr(m):
        return (p * y * m).sum() / (y * m).sum()

    def f1(m):
        tp, fp, fn = (p * y * m).sum(), (p * (1 - y) * m).sum(), ((1 - p) * y * m).sum()
        return 2 * tp / (2 * tp + fp + fn)

    a, b = g == 0, g == 1
    return {"tpr_gap": tpr(a) - tpr(b), "f1_parity": f1(~a) - 0.02 - f1(a)}


def _numpy_stratified_counts(g, y, resamples, rng):
    """Per resample, how often each row is drawn: n_s draws with replacement per stratum."""
    n = len(y)
    counts = np.zeros((resamples, n))
    strata = g * 2 + y.astype(int)
    for s in np.unique(strata):
        rows = np.nonzero(strata == s)[0]
        for b in range(resamples):
            picked = rng.choice(rows, size=len(rows), replace=True)
            counts[b] += np.bincount(picked, minlength=n)
    return counts


def _soft(scores, q):
    """Each row's expected prediction under the mixture (float32 weights, as the batch)."""
    qq = q.astype(np.float32).astype(np.float64)
    return (qq[:, None] * (scores.astype(np.float32) > 0)).sum(0)


def test_values_on_given_resamples_equal_a_numpy_loop_over_the_resampled_data():
    g, y, scores, q = _data(0, 300)
    single, mixture = _batches(g, y, scores, q)
    counts = _numpy_stratified_counts(g, y, 40, np.random.default_rng(1))
    counts[0] = 1.0                                         # the split itself
    got = Bootstrap(METRICS).values([single, mixture], torch.tensor(counts))
    preds = {0: (scores[0].astype(np.float32) > 0).astype(np.float64), 1: _soft(scores, q)}
    for which, p in preds.items():
        for b in range(len(counts)):
            idx = np.repeat(np.arange(len(y)), counts[b].astype(int))   # the resampled rows
            ref = _numpy_metrics(g[idx], y[idx], p[idx])
            for name in METRICS:
                assert float(got[which][name][b]) == pytest.approx(ref[name], abs=1e-12)
    exact = ExactEvaluator(METRICS).evaluate(mixture)
    for name in METRICS:         # unit counts: the exact evaluator's value, to the last bit
        assert float(got[1][name][0]) == pytest.approx(exact[name], abs=1e-14)


def test_resamples_follow_the_stratified_bootstrap_distribution_of_a_numpy_loop():
    g, y, scores, q = _data(2, 400)
    single, mixture = _batches(g, y, scores, q)
    n = 3000
    strata = stratum_codes(single.labels, single.groups["g"])
    got = Bootstrap(METRICS).resample([single, mixture], strata, resamples=n, seed=5)
    counts = _numpy_stratified_counts(g, y, n, np.random.default_rng(7))
    preds = {0: (scores[0].astype(np.float32) > 0).astype(np.float64), 1: _soft(scores, q)}
    for which, p in preds.items():
        ref = {name: [] for name in METRICS}
        for b in range(n):
            idx = np.repeat(np.arange(len(y)), counts[b].astype(int))
            for name, v in _numpy_metrics(g[idx], y[idx], p[idx]).items():
                ref[name].append(v)
        for name in METRICS:
            ours, theirs = got[which][name].numpy(), np.array(ref[name])
            sd = theirs.std()
            # Monte Carlo error of a mean over 3000 draws is sd/55; of a sd, ~1.3 %
            assert ours.mean() == pytest.approx(theirs.mean(), abs=0.1 * sd)
            assert ours.std() == pytest.approx(sd, rel=0.08)
            for level in (0.025, 0.975):
                assert np.quantile(ours, level) == pytest.approx(np.quantile(theirs, level),
                                                                 abs=0.25 * sd)


def test_resamples_keep_every_stratum_and_are_seeded():
    g, y, scores, q = _data(3, 200)
    single, _ = _batches(g, y, scores, q)
    strata = stratum_codes(single.labels, single.groups["g"])
    boot = Bootstrap({"tpr_a": true_positive_rate(A), "rows_a": true_positive_rate(A) * 0 + 1})
    one = boot.resample([single], strata, resamples=300, seed=0)[0]["tpr_a"]
    two = boot.resample([single], strata, resamples=300, seed=0)[0]["tpr_a"]
    other = boot.resample([single], strata, resamples=300, seed=1)[0]["tpr_a"]
    assert torch.equal(one, two) and not torch.equal(one, other)
    # a stratified resample of group a's positives has as many positives as the data, so
    # TPR(a) takes values k / n_pos only
    n_pos = int(((g == 0) & (y == 1)).sum())
    k = one.numpy() * n_pos
    assert np.allclose(k, np.round(k), atol=1e-9)


def test_multinomial_counts_have_the_multinomial_moments():
    sizes = torch.tensor([3.0, 1.0, 6.0, 5.0, 5.0])
    strata = torch.tensor([0, 0, 0, 1, 1])
    n = 20000
    c = multinomial_counts(sizes, strata, n, np.random.default_rng(0)).numpy()
    assert np.all(c[:, :3].sum(1) == 10) and np.all(c[:, 3:].sum(1) == 10)
    p = np.array([0.3, 0.1, 0.6, 0.5, 0.5])
    total = 10
    assert np.all(np.abs(c.mean(0) - total * p) <= 5 * np.sqrt(total * p * (1 - p) / n))
    assert c.var(0) == pytest.approx(total * p * (1 - p), rel=0.05)
    cov = np.cov(c[:, 0], c[:, 2])[0, 1]
    assert cov == pytest.approx(-total * p[0] * p[2], rel=0.08)
    assert abs(np.corrcoef(c[:, 0], c[:, 3])[0, 1]) < 0.03       # strata are independent


def test_percentile_interval_is_numpys_quantile_of_the_finite_values():
    v = np.random.default_rng(0).normal(size=999)
    lo, hi = percentile_interval(torch.tensor(v), 0.9)
    assert (lo, hi) == pytest.approx(tuple(np.quantile(v, [0.05, 0.95])), abs=1e-12)
    w = torch.tensor(np.concatenate([v, [np.nan] * 100, [np.inf]]))
    assert percentile_interval(w) == pytest.approx(tuple(np.quantile(v, [0.025, 0.975])),
                                                   abs=1e-12)
    assert percentile_interval(torch.tensor([1.0, np.nan, np.nan])) is None


def _population_sample(rng, n):
    """Group a or b (1:1), label P(y=1|a)=0.3, P(y=1|b)=0.5, and a fixed classifier with
    P(ŷ=1 | y, group) below: its true TPR gap and F1 parity are known in closed form."""
    g = rng.integers(0, 2, n)
    base = np.where(g == 0, 0.3, 0.5)
    y = (rng.random(n) < base).astype(np.float64)
    hit = np.where(y == 1, np.where(g == 0, 0.7, 0.6), np.where(g == 0, 0.1, 0.2))
    pred = (rng.random(n) < hit).astype(np.float64)
    return g, y, pred


def _population_truth():
    def f1(pi, tpr, fpr):
        tp, fp, fn = pi * tpr, (1 - pi) * fpr, pi * (1 - tpr)
        return 2 * tp / (2 * tp + fp + fn)

    return {"tpr_gap": 0.7 - 0.6, "f1_parity": f1(0.5, 0.6, 0.2) - 0.02 - f1(0.3, 0.7, 0.1)}


def test_intervals_cover_the_true_value_about_95_percent_of_the_time():
    truth = _population_truth()
    metrics = {"tpr_gap": METRICS["tpr_gap"], "f1_parity": METRICS["f1_parity"]}
    boot = Bootstrap(metrics)
    rng = np.random.default_rng(11)
    trials, covered = 200, {name: 0 for name in metrics}
    for t in range(trials):
        g, y, pred = _population_sample(rng, 1000)
        batch = Batch(scores=torch.tensor(2 * pred - 1, dtype=torch.float32),
                      labels=torch.tensor(y, dtype=torch.float32),
                      groups={"g": torch.tensor(g)}, group_values={"g": GROUPS})
        strata = stratum_codes(batch.labels, batch.groups["g"])
        (values,) = boot.resample([batch], strata, resamples=1000, seed=t)
        for name in metrics:
            lo, hi = percentile_interval(values[name])
            covered[name] += lo <= truth[name] <= hi
    for name in metrics:
        # binomial sd of the coverage over 200 trials at 0.95: 0.015
        assert 0.90 <= covered[name] / trials <= 0.99, (name, covered[name])


def test_bad_inputs_are_named():
    g, y, scores, q = _data(4, 50)
    single, _ = _batches(g, y, scores, q)
    boot = Bootstrap(METRICS)
    with pytest.raises(RatesError, match="counts must be"):
        boot.values([single], torch.ones(3, 49))
    with pytest.raises(RatesError, match="strata must be"):
        boot.resample([single], torch.zeros(49, dtype=torch.long))
    other = Batch(scores=single.scores, labels=1 - single.labels, groups=single.groups,
                  group_values=single.group_values)
    with pytest.raises(RatesError, match="same rows"):
        boot.resample([single, other], torch.zeros(50, dtype=torch.long))
    with pytest.raises(RatesError, match="Expression or a Constraint"):
        Bootstrap({"x": A})
