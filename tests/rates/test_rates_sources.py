"""Rates on several source data sets in one batch (paper 001): per-source rates against numpy,
a source absent from a minibatch (running estimates), and the refusal of a rate that reads
labels on an unlabeled source (whose labels are never read: coverage and churn there do not
depend on them)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fairgames.rates as R
from fairgames.rates import Batch, RateEvaluator, RatesError, source

NAMES = ["d1", "d2", "d3"]


def sources_batch(seed: int, n: int = 97, *, present=(0, 1, 2), weights: bool = True,
                  unlabeled=("d3",), labels_on_unlabeled: float = 0.0) -> Batch:
    """Random scores, labels, baseline scores, weights and source ids drawn from ``present``;
    the rows of ``unlabeled`` sources get the label ``labels_on_unlabeled``."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.tensor(present)[torch.randint(0, len(present), (n,), generator=gen)]
    y = (torch.rand(n, generator=gen) < 0.4).float()
    for name in unlabeled:
        y[src == NAMES.index(name)] = labels_on_unlabeled
    return Batch(scores=2 * torch.randn(n, generator=gen), labels=y,
                 weights=torch.rand(n, generator=gen) + 0.1 if weights else None,
                 baseline_scores=2 * torch.randn(n, generator=gen), sources=src,
                 source_names=NAMES, unlabeled_sources=unlabeled)


def numpy_rates(b: Batch, name: str) -> dict[str, float]:
    """The reference: ppr / tpr / error on the labeled sources, coverage / churn on any, as
    weighted means over the source's rows (numpy, float64)."""
    s, y = b.scores.double().numpy(), b.labels.double().numpy()
    w = b.weights.detach().double().numpy() if b.weights is not None else np.ones(len(s))
    keep = b.sources.numpy() == NAMES.index(name)
    s, y, w = s[keep], y[keep], w[keep]
    yhat = (s > 0).astype(float)
    base = (b.baseline_scores.double().numpy()[keep] > 0).astype(float)
    out = {"ppr": np.average(yhat, weights=w), "churn": np.average(yhat != base, weights=w)}
    if name not in b.unlabeled_sources:
        out["tpr"] = np.average(yhat[y == 1], weights=w[y == 1])
        out["error"] = np.average(yhat != y, weights=w)
    return out


def expressions(name: str, labeled: bool) -> dict[str, R.Expression]:
    where = source(name)
    out = {"ppr": R.positive_prediction_rate(where), "churn": R.churn_rate(where)}
    if labeled:
        out |= {"tpr": R.true_positive_rate(where), "error": R.error_rate(where)}
    return out


ALL = {f"{k}[{n}]": e for n in NAMES for k, e in expressions(n, n != "d3").items()}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("weights", [True, False])
def test_rates_per_source_equal_numpy(seed, weights):
    b = sources_batch(seed, weights=weights)
    ev = RateEvaluator(list(ALL.values()))
    exact = ev.evaluate_split([b])
    step = ev(b, update=False)          # the training pass (fused: hard factors only)
    for n in NAMES:
        for k, ref in numpy_rates(b, n).items():
            e = ALL[f"{k}[{n}]"]
            assert float(e.evaluate(exact)) == pytest.approx(ref, abs=1e-12), (k, n)
            assert float(e.evaluate(step)) == pytest.approx(ref, abs=1e-5), (k, n)


@pytest.mark.parametrize("path", ["fused", "general"])
def test_a_source_absent_from_a_minibatch_reads_its_running_rate(path):
    # d2 is absent from every other minibatch: its leaves read the bias-corrected moving
    # average of their values over the minibatches where d2 had rows (package docstring)
    decay = 0.9
    exprs = [R.true_positive_rate(source("d2")), R.positive_prediction_rate(source("d2")),
             R.error_rate(source("d1"))]
    ev = RateEvaluator(exprs, decay=decay).train()
    average, power = np.zeros(2), 1.0
    for step in range(6):
        present = (0, 1, 2) if step % 2 == 0 else (0, 2)
        b = sources_batch(step, present=present, weights=True)
        if path == "general":     # a differentiable weight takes the op-by-op pass
            b.weights = b.weights.clone().requires_grad_(True)
        v = ev(b)
        if 1 in present:
            ref = numpy_rates(b, "d2")
            now = np.array([ref["tpr"], ref["ppr"]])
            average, power = decay * average + (1 - decay) * now, power * decay
            assert int(v.empty_subsets) == 0
        else:
            now = average / (1 - power)
            assert int(v.empty_subsets) > 0
        for e, want in zip(exprs[:2], now, strict=True):
            assert float(e.evaluate(v)) == pytest.approx(want, abs=1e-5), (step, str(e))
        assert float(exprs[2].evaluate(v)) == pytest.approx(numpy_rates(b, "d1")["error"],
                                                            abs=1e-5)


@pytest.mark.parametrize("rate", ["tpr", "error", "label=1", "group_loss", "unrestricted"])
def test_a_rate_reading_labels_on_an_unlabeled_source_is_refused(rate):
    where = {"tpr": source("d3"), "error": source("d3") | source("d1"),
             "label=1": source("d3") & R.positive_label(), "group_loss": source("d3"),
             "unrestricted": None}[rate]
    e = {"tpr": R.true_positive_rate, "error": R.error_rate,
         "label=1": R.positive_prediction_rate, "group_loss": lambda w: R.group_loss("hinge", w),
         "unrestricted": R.error_rate}[rate](where)
    ev = RateEvaluator([R.coverage(source("d3")), e])
    b = sources_batch(0)
    for run in (lambda: ev(b), lambda: ev.evaluate_split([b])):
        with pytest.raises(RatesError, match=r"unlabeled source 'd3'.*source\('d1'\)"):
            run()


def test_a_label_rate_on_the_labeled_sources_is_accepted():
    # excluding the unlabeled source by a negation is as good as naming a labeled one
    ev = RateEvaluator([R.error_rate(~source("d3")), R.true_positive_rate(source("d2")),
                        R.coverage(source("d3"))])
    b = sources_batch(1)
    y, keep = b.labels.numpy(), b.sources.numpy() != 2
    w = b.weights.double().numpy()
    err = np.average((b.scores.numpy() > 0) != y, weights=w * keep)
    assert float(R.error_rate(~source("d3")).evaluate(ev.evaluate_split([b]))) == \
        pytest.approx(err, abs=1e-12)


@pytest.mark.parametrize("garbage", [1.0, 0.0])
def test_coverage_and_churn_on_an_unlabeled_source_never_read_its_labels(garbage):
    # the same batch with the unlabeled source's labels set to 1 gives the same values of
    # every leaf, in the training pass and exactly (labels of d3 are never read)
    exprs = [R.coverage(source("d3")), R.churn_rate(source("d3")),
             R.error_rate(source("d1")), R.true_positive_rate(source("d2"))]
    zero = sources_batch(2)
    other = sources_batch(2, labels_on_unlabeled=garbage)
    assert garbage == 0.0 or not torch.equal(zero.labels, other.labels)
    ev = RateEvaluator(exprs).train()
    ev_other = RateEvaluator(exprs).train()
    for _ in range(3):
        a, b = ev(zero), ev_other(other)
        torch.testing.assert_close(a.true, b.true, rtol=0, atol=0)
        torch.testing.assert_close(a.upper, b.upper, rtol=0, atol=0)
    exact = RateEvaluator(exprs).evaluate_split([other])
    ref = numpy_rates(zero, "d3")
    assert float(exprs[0].evaluate(exact)) == pytest.approx(ref["ppr"], abs=1e-12)
    assert float(exprs[1].evaluate(exact)) == pytest.approx(ref["churn"], abs=1e-12)


def test_unlabeled_sources_must_be_among_the_source_names():
    with pytest.raises(RatesError, match="unlabeled_sources.*'d9'"):
        Batch(scores=torch.zeros(2), labels=torch.zeros(2), sources=torch.tensor([0, 1]),
              source_names=["d1", "d2"], unlabeled_sources=("d9",))
