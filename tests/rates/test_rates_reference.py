"""Every helper's true value against independent numpy / scikit-learn / fairlearn computations.

The data are random (hypothesis draws the seed, size and options) with example weights, a hard
attribute "h" with a value absent from the batch, a soft attribute "s" ([B, G] memberships whose
rows sum to at most 1) with a value of zero membership, baseline scores, sources, and scores,
a mixture of models or probabilities. The references work on the expanded rows of conftest.py,
never on the evaluator's partition.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from fairlearn.metrics import (
    MetricFrame,
    false_negative_rate,
    false_positive_rate,
    selection_rate,
    true_negative_rate,
    true_positive_rate,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import rel_entr
from sklearn.metrics import (
    accuracy_score,
    confusion_matrix,
    fbeta_score,
    precision_score,
    recall_score,
)

import fairgames.rates as R
from fairgames.rates import (
    EmptySubsetError,
    RateEvaluator,
    baseline_negative,
    baseline_positive,
    everything,
    group,
    negative_label,
    positive_label,
    source,
)

THRESHOLDS = (-1.0, -0.25, 0.0, 0.5, 1.25)
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)

# (name, subset, the same subset as a numpy mask over the expanded rows)
SUBSETS = [
    ("all", everything(), lambda r: np.ones(len(r.w), bool)),
    ("h=a", group("h", "a"), lambda r: r.hard == 0),
    ("h=b", group("h", "b"), lambda r: r.hard == 1),
    ("h=3", group("h", 3), lambda r: r.hard == 3),          # integer code; "d": empty
    ("s=u", group("s", "u"), lambda r: r.soft == 0),
    ("s=w", group("s", "w"), lambda r: r.soft == 2),        # zero membership when empty
    ("~s=u", ~group("s", "u"), lambda r: r.soft != 0),
    ("h=a&s=v", group("h", "a") & group("s", "v"), lambda r: (r.hard == 0) & (r.soft == 1)),
    ("h=b|s=u", group("h", "b") | group("s", "u"), lambda r: (r.hard == 1) | (r.soft == 0)),
    ("~(h=a|y=1)", ~(group("h", "a") | positive_label()),
     lambda r: ~((r.hard == 0) | (r.y == 1))),
    ("src=s1", source("s1"), lambda r: r.src == 1),
    ("base+&h=c", baseline_positive() & group("h", "c"), lambda r: r.b0 & (r.hard == 2)),
    ("base-", baseline_negative(), lambda r: ~r.b0),
]
# Each subset's label / baseline part (its group and source conditions dropped), as a mask:
# where a subset is empty in a batch, its leaves read their rate on this part (every example
# where not listed).
PARTS = {"~(h=a|y=1)": lambda r: r.y == 0, "base+&h=c": lambda r: r.b0,
         "base-": lambda r: ~r.b0}


def _np_losses() -> dict:
    c = 5.0
    return {
        "squared": lambda s, y: 0.5 * (y - s) ** 2,
        "absolute": lambda s, y: np.abs(y - s),
        "logistic": lambda s, y: np.logaddexp(0.0, -(2 * y - 1) * s),
        "hinge": lambda s, y: np.maximum(0.0, 1.0 - (2 * y - 1) * s),
        "bounded_logistic": lambda s, y: np.logaddexp(0.0, -c * (2 * y - 1) * (2 * s - 1))
        / (2 * np.log1p(np.exp(c))),
    }


NP_LOSSES = _np_losses()


# ------------------------------------------------------------------------ references
def leaf(x: np.ndarray, sw: np.ndarray) -> tuple[float, bool]:
    """Weighted mean of ``x`` and whether the subset is empty (then 0: the value of an empty
    subset's label / baseline part; an empty-in-batch subset reads its rate on that part)."""
    d = sw.sum()
    return (float(x @ sw / d), False) if d > 0 else (0.0, True)


def cells(r, sw: np.ndarray) -> tuple[float, float, float, float]:
    """Weighted (tn, fp, fn, tp) from scikit-learn's confusion matrix."""
    if sw.sum() == 0:
        return 0.0, 0.0, 0.0, 0.0
    return tuple(confusion_matrix(r.y, r.yhat, labels=[0, 1], sample_weight=sw).ravel())


def _div(a: float, b: float) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(a) / np.float64(b))


def _sk(fn, r, sw, **kw) -> float:
    if sw.sum() == 0:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(fn(r.y, r.yhat, sample_weight=sw, zero_division=np.nan, **kw))


def leaf_metrics(mode: str) -> list[tuple[str, object, object]]:
    """(name, helper(where) -> Expression, reference(rows, sw) -> (value, empty))."""
    y1 = lambda r: r.y == 1  # noqa: E731
    out = [
        ("ppr", R.positive_prediction_rate, lambda r, sw: leaf(r.yhat, sw)),
        ("npr", R.negative_prediction_rate, lambda r, sw: leaf(1 - r.yhat, sw)),
        ("coverage", R.coverage, lambda r, sw: leaf(r.yhat, sw)),
        ("tpr", R.true_positive_rate, lambda r, sw: leaf(r.yhat, sw * y1(r))),
        ("recall", R.recall, lambda r, sw: leaf(r.yhat, sw * y1(r))),
        ("fnr", R.false_negative_rate, lambda r, sw: leaf(1 - r.yhat, sw * y1(r))),
        ("fpr", R.false_positive_rate, lambda r, sw: leaf(r.yhat, sw * ~y1(r))),
        ("tnr", R.true_negative_rate, lambda r, sw: leaf(1 - r.yhat, sw * ~y1(r))),
        ("tp", R.true_positive_proportion, lambda r, sw: leaf(r.y * r.yhat, sw)),
        ("fp", R.false_positive_proportion, lambda r, sw: leaf((1 - r.y) * r.yhat, sw)),
        ("tn", R.true_negative_proportion, lambda r, sw: leaf((1 - r.y) * (1 - r.yhat), sw)),
        ("fn", R.false_negative_proportion, lambda r, sw: leaf(r.y * (1 - r.yhat), sw)),
        ("error", R.error_rate, lambda r, sw: leaf(r.yhat != r.y, sw)),
        ("accuracy", R.accuracy,
         lambda r, sw: (float(accuracy_score(r.y, r.yhat, sample_weight=sw)), False)
         if sw.sum() > 0 else (0.0, True)),
        ("churn", R.churn_rate, lambda r, sw: leaf(r.yhat != r.b0, sw)),
        ("win", R.win_rate, lambda r, sw: leaf((r.b0 != r.y) & (r.yhat == r.y), sw)),
        ("loss", R.loss_rate, lambda r, sw: leaf((r.b0 == r.y) & (r.yhat != r.y), sw)),
        ("label", R.label_rate, lambda r, sw: leaf(r.y, sw)),
    ]
    if mode != "probabilities":   # threshold events and losses need scores
        for i, z in enumerate(THRESHOLDS):
            out.append((f"score>={z}", lambda where, i=i: R.score_rates(THRESHOLDS, where)[i],
                        lambda r, sw, z=z: leaf(r.s >= z, sw)))
        for name, fn in NP_LOSSES.items():
            out.append((f"loss:{name}", lambda where, name=name: R.group_loss(name, where),
                        lambda r, sw, fn=fn: leaf(fn(r.s, r.y), sw)))
    return out


def _tpr_tnr(c):
    tn, fp, fn, tp = c
    return _div(tp, tp + fn), _div(tn, tn + fp)


def metric_refs() -> list[tuple[str, object, object]]:
    """(name, helper(where), reference(stats, sw_all) -> value or nan when undefined)."""
    def fbeta(c, beta):   # F_beta from the confusion cells (sklearn's own is checked for F1)
        tn, fp, fn, tp = c
        b2 = beta * beta
        return _div((1 + b2) * tp, (1 + b2) * tp + b2 * fn + fp)

    def gmean(st, _):
        a, b = _tpr_tnr(st.cells)
        return float(np.sqrt(a * b))

    def hmean(st, _):
        a, b = _tpr_tnr(st.cells)
        with np.errstate(divide="ignore"):
            return float(2.0 / (1.0 / np.float64(a) + 1.0 / np.float64(b)))

    def qmean(st, _):
        tn, fp, fn, tp = st.cells
        fnr, fpr = _div(fn, fn + tp), _div(fp, fp + tn)
        return float(1.0 - np.sqrt((fnr ** 2 + fpr ** 2) / 2.0))

    def kld(st, sw_all):
        r = st.rows
        p = _div(r.y @ sw_all, sw_all.sum())
        p_hat = _div(r.yhat @ st.sw, st.sw.sum())
        return float(rel_entr(p, p_hat) + rel_entr(1 - p, 1 - p_hat))

    def win_loss(st, _):
        r, sw = st.rows, st.sw
        return _div(((r.b0 != r.y) & (r.yhat == r.y)) @ sw, ((r.b0 == r.y) & (r.yhat != r.y)) @ sw)

    return [
        ("precision", R.precision, lambda st, _: st.precision),
        ("fmeasure", R.fmeasure, lambda st, _: st.f1),
        ("f1_from_cells", lambda where: R.fbeta(1.0, where), lambda st, _: fbeta(st.cells, 1.0)),
        ("f0.5", lambda where: R.fbeta(0.5, where), lambda st, _: fbeta(st.cells, 0.5)),
        ("f2", lambda where: R.fbeta(2.0, where), lambda st, _: fbeta(st.cells, 2.0)),
        ("gmean", R.gmean, gmean),
        ("hmean", R.hmean, hmean),
        ("qmean", R.qmean, qmean),
        ("kld", R.kld, kld),
        ("win_loss_ratio", R.win_loss_ratio, win_loss),
    ]


class Stats:
    """scikit-learn's statistics of one subset (sample weights ``sw`` over the rows)."""

    def __init__(self, rows, sw: np.ndarray) -> None:
        self.rows, self.sw = rows, sw
        self.cells = cells(rows, sw)
        self.precision = _sk(precision_score, rows, sw)
        self.f1 = _sk(fbeta_score, rows, sw, beta=1.0)


def assert_all_close(actual, expected, names, rtol: float, atol: float) -> None:
    """All pairs close (inf equal to inf); the message names every mismatch."""
    a, e = np.asarray(actual, float), np.asarray(expected, float)
    ok = np.isclose(a, e, rtol=rtol, atol=atol) | ((a == e) & np.isinf(e))
    bad = [f"{n}: got {x!r}, expected {y!r}" for n, x, y, k in zip(names, a, e, ok, strict=True)
           if not k]
    assert not bad, "\n".join(bad[:20])


# ------------------------------------------------------------------------ the big comparison
@settings(max_examples=30, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60),
       mode=st.sampled_from(["scores", "mixture", "probabilities"]),
       weighted=st.booleans(), empty=st.booleans())
def test_helpers_equal_numpy_and_sklearn(rates_data, seed, n, mode, weighted, empty):
    data = rates_data.make(seed, n, mode=mode, weighted=weighted, empty=empty)
    rows = data.rows()
    sw_all = rows.w
    leaves = leaf_metrics(mode)
    conditions = {"tpr": positive_label(), "recall": positive_label(), "fnr": positive_label(),
                  "fpr": negative_label(), "tnr": negative_label()}
    exprs, names, expected, kinds, empty_subsets = [], [], [], [], set()
    for sname, subset, mask in SUBSETS:
        sw = sw_all * mask(rows)
        part = sw_all * PARTS.get(sname, lambda r: np.ones(len(r.w), bool))(rows)
        for mname, helper, ref in leaves:
            value, is_empty = ref(rows, sw)
            if is_empty:   # a fresh evaluator's empty subset: the rate on its part
                value = ref(rows, part)[0]
            exprs.append(helper(subset))
            names.append(f"{mname}[{sname}]")
            expected.append(value)
            kinds.append("leaf")
            if is_empty:   # named as the evaluator names it: where & the label condition
                empty_subsets.add(str(subset & conditions.get(mname, everything())))
        stats = Stats(rows, sw)
        for mname, helper, ref in metric_refs():
            exprs.append(helper(subset))
            names.append(f"{mname}[{sname}]")
            expected.append(ref(stats, sw_all))
            kinds.append("metric")
    exprs.append(R.predictive_parity(group("h", "a"), group("s", "u")))
    names.append("predictive_parity")
    expected.append(_sk(precision_score, rows, sw_all * (rows.hard == 0))
                    - _sk(precision_score, rows, sw_all * (rows.soft == 0)))
    exprs.append(R.fmeasure_parity(group("s", "v"), ~group("s", "v")))
    names.append("fmeasure_parity")
    expected.append(_sk(fbeta_score, rows, sw_all * (rows.soft == 1), beta=1.0)
                    - _sk(fbeta_score, rows, sw_all * (rows.soft != 1), beta=1.0))
    kinds += ["metric", "metric"]

    ev = RateEvaluator(exprs)
    values = ev(data.batch())
    actual = np.array([float(e.evaluate(values)) for e in exprs])
    expected = np.array(expected)
    # Leaves are always compared (on an empty-in-batch subset: the rate on its label /
    # baseline part); undefined metrics (0/0) not.
    keep = np.array([k == "leaf" for k in kinds]) | ~np.isnan(expected)
    assert keep.sum() >= len(SUBSETS) * len(leaves)
    kept = [nm for nm, k in zip(names, keep, strict=True) if k]
    assert_all_close(actual[keep], expected[keep], kept, rtol=1e-4, atol=1e-5)

    # The whole split, exactly in float64: the same values, or an error naming empty subsets.
    if empty_subsets:
        with pytest.raises(EmptySubsetError) as err:
            ev.evaluate_split([data.batch(torch.float64)])
        for name in empty_subsets:
            assert name in str(err.value)
        return
    split = ev.evaluate_split([data.batch(torch.float64)])
    assert split.true.dtype == torch.float64
    exact = np.array([float(e.evaluate(split)) for e in exprs])
    defined = ~np.isnan(expected)
    assert_all_close(exact[defined], expected[defined],
                     [nm for nm, k in zip(names, defined, strict=True) if k], 1e-9, 1e-12)


# ------------------------------------------------------------------------ fairlearn
FAIRLEARN = {
    "selection_rate": (selection_rate, R.positive_prediction_rate),
    "tpr": (true_positive_rate, R.true_positive_rate),
    "fpr": (false_positive_rate, R.false_positive_rate),
    "fnr": (false_negative_rate, R.false_negative_rate),
    "tnr": (true_negative_rate, R.true_negative_rate),
    "precision": (lambda y, p, sample_weight: precision_score(
        y, p, sample_weight=sample_weight, zero_division=np.nan), R.precision),
    "recall": (lambda y, p, sample_weight: recall_score(
        y, p, sample_weight=sample_weight, zero_division=np.nan), R.recall),
    "accuracy": (accuracy_score, R.accuracy),
    "f1": (lambda y, p, sample_weight: fbeta_score(
        y, p, beta=1.0, sample_weight=sample_weight, zero_division=np.nan), R.fmeasure),
}


@settings(max_examples=20, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(20, 200), weighted=st.booleans())
def test_hard_group_rates_equal_fairlearn_metricframe(rates_data, seed, n, weighted):
    data = rates_data.make(seed, n, mode="scores", weighted=weighted, empty=True)
    y, yhat = data.y.astype(int), (data.scores > 0).astype(int)
    w = np.ones(n) if data.w is None else data.w
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = MetricFrame(metrics={k: f for k, (f, _) in FAIRLEARN.items()}, y_true=y,
                            y_pred=yhat, sensitive_features=np.array(rates_data.HARD)[data.hard],
                            sample_params={k: {"sample_weight": w} for k in FAIRLEARN})
    assert "d" not in frame.by_group.index      # the empty value is absent from fairlearn's table
    exprs = {(k, v): helper(group("h", v)) for k, (_, helper) in FAIRLEARN.items()
             for v in frame.by_group.index}
    exprs.update({(k, "overall"): helper() for k, (_, helper) in FAIRLEARN.items()})
    ev = RateEvaluator(list(exprs.values()))
    values = ev(data.batch())
    names = [f"{k}[{v}]" for k, v in exprs]
    expected = np.array([frame.overall[k] if v == "overall" else frame.by_group.loc[v, k]
                         for k, v in exprs])
    # A group with no positives (no negatives) has no TPR (FPR): fairlearn says 0, the
    # evaluator reads the batch's own rate of that kind (an empty subset's first value).
    conditioned = {"tpr": y == 1, "recall": y == 1, "fnr": y == 1, "fpr": y == 0, "tnr": y == 0}
    for i, (k, v) in enumerate(exprs):
        if k in conditioned and v != "overall":
            in_group = np.array(rates_data.HARD)[data.hard] == v
            if not (w * conditioned[k] * in_group).sum() > 0:
                expected[i] = frame.overall[k]
    actual = np.array([float(e.evaluate(values)) for e in exprs.values()])
    defined = ~np.isnan(expected)
    assert defined.sum() >= len(FAIRLEARN) * 2
    assert_all_close(actual[defined], expected[defined],
                     [nm for nm, k in zip(names, defined, strict=True) if k], 1e-4, 1e-5)


# ------------------------------------------------------------------------ mixtures
@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(5, 60), members=st.integers(1, 4))
def test_mixture_averages_leaves_then_applies_ratios_and_psi(rates_data, seed, n, members):
    data = rates_data.make(seed, n, mode="mixture", members=members, empty=False)
    where = group("h", "a") | group("s", "u")
    leaves = [R.true_positive_proportion(where), R.positive_prediction_rate(where),
              R.true_positive_rate(where), R.true_negative_rate(where), R.error_rate(),
              R.churn_rate(group("s", "v")), *R.score_rates([0.0, 0.5], where),
              R.group_loss("logistic", where)]
    prec, gm = R.precision(where), R.gmean(where)
    ev = RateEvaluator(leaves + [prec, gm], surrogate="logistic")
    mix = ev(data.batch())
    per_member = [ev(data.batch(scores=torch.tensor(s, dtype=torch.float32),
                                mixture_weights=None)) for s in data.scores]
    q = torch.tensor(data.q, dtype=torch.float32)
    for field in ("true", "upper", "lower"):
        stacked = torch.stack([getattr(v, field) for v in per_member])
        torch.testing.assert_close(getattr(mix, field), (q[:, None] * stacked).sum(0),
                                   rtol=1e-5, atol=1e-6)
    tp = [float(leaves[0].evaluate(v)) for v in per_member]
    pp = [float(leaves[1].evaluate(v)) for v in per_member]
    tpr = [float(leaves[2].evaluate(v)) for v in per_member]
    tnr = [float(leaves[3].evaluate(v)) for v in per_member]
    if np.dot(data.q, pp) > 0:   # the ratio of the averaged leaves, not an average of ratios
        assert float(prec.evaluate(mix)) == pytest.approx(np.dot(data.q, tp) / np.dot(data.q, pp),
                                                          rel=1e-5)
    assert float(gm.evaluate(mix)) == pytest.approx(
        np.sqrt(np.dot(data.q, tpr) * np.dot(data.q, tnr)), rel=1e-5, abs=1e-6)


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(5, 60), members=st.integers(1, 4))
def test_probabilities_of_a_mixture_give_the_mixture_rates(rates_data, seed, n, members):
    data = rates_data.make(seed, n, mode="mixture", members=members)
    exprs = [R.true_positive_rate(group("h", "b")), R.fmeasure(group("s", "u")), R.error_rate(),
             R.win_rate(source("s0")), R.hmean()]
    ev = RateEvaluator(exprs)
    p = (data.q[:, None] * (data.scores > 0)).sum(0)
    mix = ev(data.batch())
    prob = ev(data.batch(scores=None, mixture_weights=None,
                         probabilities=torch.tensor(p, dtype=torch.float32)))
    torch.testing.assert_close(prob.true, mix.true, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------ real labels
@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), weighted=st.booleans())
def test_group_loss_with_real_labels(rates_data, seed, n, weighted):
    data = rates_data.make(seed, n, weighted=weighted, label_kind="real")
    rows = data.rows()
    exprs, refs = [], []
    for sname, subset, mask in SUBSETS:
        if "y=" in str(subset) or "label" in str(subset):
            continue
        part = PARTS.get(sname, lambda r: np.ones(len(r.w), bool))
        for name in ("squared", "absolute", "bounded_logistic"):
            exprs.append(R.group_loss(name, subset))
            loss = NP_LOSSES[name](rows.s, rows.y)
            value, is_empty = leaf(loss, rows.w * mask(rows))
            refs.append(leaf(loss, rows.w * part(rows))[0] if is_empty else value)
    values = RateEvaluator(exprs)(data.batch())
    actual = [float(e.evaluate(values)) for e in exprs]
    np.testing.assert_allclose(actual, refs, rtol=1e-4, atol=1e-5)
