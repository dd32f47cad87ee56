"""Surrogate bounds: upper ≥ true ≥ lower for hinge and logistic, leaf by leaf and through the
expression graph; sigmoid and ramp are approximations whose upper and lower coincide; gradients
stay finite when groups are empty in the batch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fairgames.rates as R
from fairgames.rates import RateEvaluator, Surrogate, everything, group, source

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)
TOL = 1e-5

WHERES = [everything(), group("h", "a"), group("h", "d"), group("s", "u"), group("s", "w"),
          ~group("s", "v") & group("h", "b"), group("h", "c") | R.baseline_positive(),
          source("s1")]
LEAF_HELPERS = [
    R.positive_prediction_rate, R.negative_prediction_rate, R.true_positive_rate,
    R.false_negative_rate, R.false_positive_rate, R.true_negative_rate,
    R.true_positive_proportion, R.false_positive_proportion, R.true_negative_proportion,
    R.false_negative_proportion, R.error_rate, R.accuracy, R.churn_rate, R.win_rate,
    R.loss_rate, R.label_rate,
]


def bounded_expressions() -> list:
    """Affine expressions, ratios and monotone ψ of rates (bounds must propagate)."""
    a, b, u = group("h", "a"), group("h", "b"), group("s", "u")
    return [
        R.true_positive_rate(a) - R.true_positive_rate(b) + 0.1,
        R.error_rate() - 2.0 * R.false_positive_rate(u),
        1.0 - R.accuracy(a) + 0.5 * R.churn_rate(),
        -3.0 * R.win_rate(u) + R.loss_rate(),
        R.precision(), R.precision(u), R.fmeasure(), R.fbeta(2.0, a), -R.fmeasure(b),
        R.win_loss_ratio(), R.predictive_parity(a, u), R.fmeasure_parity(u, ~u),
        R.gmean(), R.hmean(a), R.qmean(u), 1.0 - R.gmean(u), R.hmean() - R.qmean(),
    ]


@pytest.mark.parametrize("kind", ["hinge", "logistic"])
@pytest.mark.parametrize("strict", [True, False])
def test_surrogate_functions_bound_the_indicator(kind, strict):
    m = torch.cat([torch.linspace(-6, 6, 1201), torch.tensor([0.0, -0.0, 1e-7, -1e-7, 40.0])])
    hit = (m > 0 if strict else m >= 0).float()
    up, lo = Surrogate(kind).bounds(m)
    assert bool((up >= hit).all()) and bool((lo <= hit).all())
    scaled_up, scaled_lo = Surrogate(kind, scale=0.25).bounds(m)
    assert bool((scaled_up >= hit).all()) and bool((scaled_lo <= hit).all())
    # closed forms: hinge max(0, 1 + m) / 1 - max(0, 1 - m); logistic log2(1 + e^{±m})
    x = m.double().numpy()
    if kind == "hinge":
        ref_up, ref_lo = np.maximum(0, 1 + x), 1 - np.maximum(0, 1 - x)
    else:
        ref_up, ref_lo = np.logaddexp(0, x) / math.log(2), 1 - np.logaddexp(0, -x) / math.log(2)
    np.testing.assert_allclose(up.double().numpy(), ref_up, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(lo.double().numpy(), ref_lo, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["sigmoid", "ramp"])
def test_smooth_approximations_coincide(kind):
    m = torch.linspace(-4, 4, 81)
    up, lo = Surrogate(kind).bounds(m)
    assert torch.equal(up, lo)
    ref = torch.sigmoid(m) if kind == "sigmoid" else torch.clamp(0.5 + m, 0, 1)
    torch.testing.assert_close(up, ref)
    assert not Surrogate(kind).is_bound and Surrogate("hinge").is_bound
    # ... and, unlike the bounds, stay in [0, 1] (what lets SPADE/NEMSIS play KLD, Remark 3)
    wide = torch.linspace(-50, 50, 201)
    assert Surrogate(kind).in_unit_interval and not Surrogate("hinge").in_unit_interval
    assert bool(((up >= 0) & (up <= 1)).all())
    assert bool((Surrogate(kind).bounds(wide)[0] <= 1).all())
    assert not bool((Surrogate("hinge").bounds(wide)[0] <= 1).all())


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 50),
       kind=st.sampled_from(["hinge", "logistic"]), mixture=st.booleans(),
       weighted=st.booleans())
def test_leaf_and_expression_bounds_hold(rates_data, seed, n, kind, mixture, weighted):
    data = rates_data.make(seed, n, mode="mixture" if mixture else "scores", weighted=weighted)
    leaves = [h(w) for h in LEAF_HELPERS for w in WHERES]
    leaves += [r for w in WHERES[:4] for r in R.score_rates([-0.5, 0.0, 0.25], w)]
    losses = [R.group_loss(name, w) for name in ("hinge", "logistic") for w in WHERES[:4]]
    exprs = bounded_expressions()
    ev = RateEvaluator(leaves + losses + exprs, surrogate=kind)
    v = ev(data.batch())
    assert bool((v.upper >= v.true - TOL).all()), "an upper bound is below the true rate"
    assert bool((v.lower <= v.true + TOL).all()), "a lower bound is above the true rate"
    # bounds are not the trivial ones: some are strict somewhere
    assert bool((v.upper > v.true + 1e-3).any()) and bool((v.lower < v.true - 1e-3).any())
    for e in losses:   # a loss is differentiable itself: its "bounds" are its value
        (i,) = [v.position(lf) for lf in e.leaves()]
        assert float(v.upper[i]) == pytest.approx(float(v.true[i]), rel=1e-6, abs=1e-6)
        assert float(v.lower[i]) == pytest.approx(float(v.true[i]), rel=1e-6, abs=1e-6)
    for e in exprs:
        true = float(e.evaluate(v, "true"))
        if not math.isfinite(true):   # a ratio whose true denominator is 0 has no value
            continue
        upper, lower = float(e.evaluate(v, "upper")), float(e.evaluate(v, "lower"))
        assert upper >= true - TOL, f"upper bound of {e}: {upper} < {true}"
        assert lower <= true + TOL, f"lower bound of {e}: {lower} > {true}"
    for e in (R.precision(), R.fmeasure(), R.fbeta(2.0, group("h", "a"))):
        # ratios in [0, 1] by structure keep bounds there, however small a surrogate
        # denominator gets (not of order 1 / floor)
        assert 0.0 <= float(e.evaluate(v, "lower")) <= float(e.evaluate(v, "upper")) <= 1.0


def test_nonmonotone_psi_has_no_bound():
    """KLD is monotone in neither argument: surrogate bounds of p̂ bound nothing (paper 000,
    Remark 3), so asking for one is an error rather than a wrong number."""
    e = R.kld(group("h", "a"))
    b = R.Batch(scores=torch.tensor([0.5, -1.0, -2.0, 2.0]),
                labels=torch.tensor([1.0, 0.0, 0.0, 1.0]),
                groups={"h": torch.tensor([0, 1, 0, 0])}, group_values={"h": ["a", "b"]})
    v = RateEvaluator([e])(b)
    assert math.isfinite(float(e.evaluate(v)))
    with pytest.raises(ValueError, match="not monotone"):
        e.evaluate(v, "upper")


@pytest.mark.parametrize("kind", ["hinge", "logistic", "sigmoid", "ramp"])
@pytest.mark.parametrize("mixture", [False, True])
def test_gradients_finite_with_groups_empty_in_the_batch(rates_data, kind, mixture):
    data = rates_data.make(3, 40, mode="mixture" if mixture else "scores", empty=True)
    assert not (data.hard == 3).any() and not data.soft[:, 2].any()   # "d" and "w" are empty
    empty_h, empty_s = group("h", "d"), group("s", "w")
    on_empty = [R.true_positive_rate(empty_h), R.false_positive_rate(empty_s),
                R.error_rate(empty_h & group("s", "u")), R.churn_rate(empty_s),
                R.group_loss("logistic", empty_h), *R.score_rates([0.0, 1.0], empty_s)]
    exprs = [R.true_positive_rate() - R.true_positive_rate(empty_h), R.precision(empty_h),
             R.fmeasure(empty_s) - R.fmeasure()]
    ev = RateEvaluator(on_empty + exprs, surrogate=kind)
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 1)
    s = model(torch.randn(data.n, 5))[:, 0]
    if mixture:   # members: the model and shifted copies of it
        s = torch.stack([s + k for k in range(len(data.q))])
    v = ev(data.batch(scores=s))
    # a rate over a subset empty in the batch is, in a fresh evaluator, its rate on the
    # subset's label / baseline part (here every example), not NaN
    on_parts = [R.true_positive_rate(), R.false_positive_rate(), R.error_rate(),
                R.churn_rate(), R.group_loss("logistic"), *R.score_rates([0.0, 1.0])]
    parts = RateEvaluator(on_parts, surrogate=kind).eval()(data.batch(scores=s.detach()))
    for e, p in zip(on_empty, on_parts, strict=True):
        (leaf,) = e.leaves()
        i = v.position(leaf)
        ref = float(p.evaluate(parts))
        assert (float(v.true[i]), float(v.upper[i].detach()), float(v.lower[i].detach())) == (
            pytest.approx(ref, rel=1e-6),) * 3
    total = v.upper.sum() + v.lower.sum()
    for e in exprs:
        total = total + e.evaluate(v, "upper") + e.evaluate(v, "lower")
    total.backward()
    for p in model.parameters():
        assert p.grad is not None and bool(torch.isfinite(p.grad).all()), p.grad
    assert bool(torch.isfinite(v.upper).all()) and bool(torch.isfinite(v.lower).all())
