"""The exact evaluator of reports (``fairgames.rates.exact``) against independent references:
scikit-learn's metrics, fairlearn's MetricFrame per group, numpy / scipy for KLD, G-mean and
the regression losses; whole splits in float64, chunked or not, with example weights."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from fairlearn.metrics import MetricFrame, false_positive_rate, selection_rate
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import rel_entr
from sklearn.metrics import (
    f1_score,
    mean_absolute_error,
    mean_squared_error,
    precision_score,
    recall_score,
)

import fairgames.rates as R
from fairgames.rates import (
    Batch,
    EmptySubsetError,
    ExactEvaluator,
    GroupTable,
    RatesError,
    group,
)

NAMES = ["a", "b", "c"]
SETTINGS = settings(max_examples=15, deadline=None, derandomize=True)


def _data(seed: int, n: int, *, real: bool = False, weighted: bool = False):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, len(NAMES), n)
    codes[: len(NAMES)] = np.arange(len(NAMES))           # every group present
    y = rng.random(n) if real else rng.integers(0, 2, n).astype(np.float64)
    s = np.round(rng.normal(0.0, 1.0, n) * 8) / 8          # ties at the threshold 0 occur
    w = rng.uniform(0.1, 2.0, n) if weighted else None
    # float32-exact inputs, so float32 tensors and float64 references see the same numbers
    cast = lambda a: None if a is None else a.astype(np.float32).astype(np.float64)  # noqa: E731
    return cast(y), cast(s), codes, cast(w)


def _batch(y, s, codes, w=None, *, real=False, rows=slice(None), **kw) -> Batch:
    t = lambda a: torch.tensor(a[rows], dtype=torch.float32)  # noqa: E731
    return Batch(scores=t(s), labels=t(y), label_kind="real" if real else "binary",
                 weights=None if w is None else t(w),
                 groups={"g": torch.tensor(codes[rows])}, group_values={"g": NAMES}, **kw)


def _chunks(y, s, codes, w=None, *, real=False, size=7):
    return [_batch(y, s, codes, w, real=real, rows=slice(i, i + size))
            for i in range(0, len(y), size)]


def _frame(metrics, y, p, codes, w):
    sw = np.ones(len(y)) if w is None else w
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MetricFrame(metrics=metrics, y_true=y, y_pred=p,
                           sensitive_features=np.array(NAMES)[codes],
                           sample_params={k: {"sample_weight": sw} for k in metrics})


def _kld(p: float, q: float) -> float:
    return float(rel_entr(p, q) + rel_entr(1 - p, 1 - q))


# --------------------------------------------------------------------------- classification
@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(12, 200), weighted=st.booleans())
def test_group_table_equals_fairlearn_and_sklearn(seed, n, weighted):
    y, s, codes, w = _data(seed, n, weighted=weighted)
    p = (s > 0).astype(int)
    table = GroupTable("g", NAMES, "binary").evaluate(_chunks(y, s, codes, w))
    frame = _frame({"ppr": selection_rate, "tpr": recall_score, "fpr": false_positive_rate,
                    "precision": precision_score, "f1": f1_score}, y.astype(int), p, codes, w)
    sw = np.ones(n) if w is None else w
    base = float(sw @ y / sw.sum())
    for k, v in enumerate(NAMES):
        row, m = table[f"g={v}"], codes == k
        assert row["count"] == pytest.approx(sw[m].sum(), rel=1e-12)
        assert row["share"] == pytest.approx(sw[m].sum() / sw.sum(), rel=1e-12)
        assert row["base_rate"] == pytest.approx(sw[m] @ y[m] / sw[m].sum(), rel=1e-12)
        assert row["error"] == pytest.approx(sw[m] @ (p[m] != y[m]) / sw[m].sum(), rel=1e-12)
        for col, ref in (("positive_rate", "ppr"), ("tpr", "tpr"), ("fpr", "fpr"),
                         ("precision", "precision"), ("fmeasure", "f1")):
            expected = frame.by_group.loc[v, ref]
            defined = {"tpr": (y[m] == 1).any(), "fpr": (y[m] == 0).any(),
                       "precision": p[m].any(), "fmeasure": (p[m] | (y[m] == 1)).any()}
            if defined.get(col, True):
                assert row[col] == pytest.approx(expected, rel=1e-12, abs=1e-15), (v, col)
            else:
                assert row[col] is None, (v, col)       # an empty denominator: undefined
        q = row["positive_rate"]
        assert row["kld"] == (pytest.approx(_kld(base, q), rel=1e-9, abs=1e-15)
                              if 0 < q < 1 or q == base else None)
    overall = table["overall"]
    assert overall["count"] == pytest.approx(sw.sum()) and overall["share"] == 1.0
    assert overall["fmeasure"] == pytest.approx(frame.overall["f1"], rel=1e-12)


def test_every_kind_of_metric_in_one_pass_equals_numpy():
    y, s, codes, w = _data(3, 500, weighted=True)
    p = (s > 0).astype(float)
    b = group("g", "b")
    metrics = {"gmean": R.gmean(), "kld_b": R.kld(b), "hinge_b": R.group_loss("hinge", b),
               "ratio": R.true_positive_rate(b) / R.positive_prediction_rate(),
               "parity": (R.fmeasure(b) >= R.fmeasure() - 0.02).named("f1_parity"),
               "rows_b": b}
    out = ExactEvaluator(metrics).evaluate(_chunks(y, s, codes, w, size=64))
    mb = codes == 1

    def mean(x, m):
        return float(w[m] @ x[m] / w[m].sum())

    one = np.ones_like(y, dtype=bool)
    tpr, tnr = mean(p, y == 1), mean(1 - p, y == 0)
    f1 = lambda m: f1_score(y[m], p[m], sample_weight=w[m])  # noqa: E731
    assert out["gmean"] == pytest.approx(np.sqrt(tpr * tnr), rel=1e-12)
    assert out["kld_b"] == pytest.approx(_kld(mean(y, one), mean(p, mb)), rel=1e-12)
    assert out["hinge_b"] == pytest.approx(mean(np.maximum(0, 1 - (2 * y - 1) * s), mb),
                                           rel=1e-12)
    assert out["ratio"] == pytest.approx(mean(p, mb & (y == 1)) / mean(p, one), rel=1e-12)
    assert out["parity"] == pytest.approx(f1(one) - 0.02 - f1(mb), rel=1e-9)   # g of g <= 0
    assert out["rows_b"] == pytest.approx(w[mb].sum(), rel=1e-12)


def test_a_mixture_is_its_expected_rates_and_probabilities_give_the_same_table():
    y, s, codes, _ = _data(5, 300)
    rng = np.random.default_rng(0)
    members = np.stack([s, s + rng.normal(0, 0.5, len(s)), -s]).astype(np.float32)
    q = torch.tensor([0.5, 0.25, 0.25])
    mix = Batch(scores=torch.tensor(members), mixture_weights=q, labels=torch.tensor(y).float(),
                groups={"g": torch.tensor(codes)}, group_values={"g": NAMES})
    prob = (q.double().numpy()[:, None] * (members > 0)).sum(0)
    table = GroupTable("g", NAMES, "binary")
    by_mixture = table.evaluate(mix)
    by_probability = table.evaluate(Batch(scores=None, probabilities=torch.tensor(prob),
                                          labels=torch.tensor(y).float(),
                                          groups={"g": torch.tensor(codes)},
                                          group_values={"g": NAMES}))
    for key, row in by_mixture.items():
        for col, v in row.items():
            assert v == pytest.approx(by_probability[key][col], rel=1e-12, abs=1e-15)
    m = codes == 2
    assert by_mixture["g=c"]["tpr"] == pytest.approx(prob[m & (y == 1)].mean(), rel=1e-12)
    assert by_mixture["g=c"]["precision"] == pytest.approx(
        (prob[m] * y[m]).sum() / prob[m].sum(), rel=1e-12)


def test_float64_whole_split_chunking_does_not_matter():
    y, s, codes, w = _data(11, 2000, weighted=True)
    ev = ExactEvaluator({"f1": R.fmeasure(group("g", "c")), "err": R.error_rate(),
                         "loss": R.group_loss("logistic")})
    whole = ev.evaluate(_batch(y, s, codes, w))
    for size in (37, 999):
        chunked = ev.evaluate(_chunks(y, s, codes, w, size=size))
        for k, v in whole.items():
            assert chunked[k] == pytest.approx(v, rel=1e-13)
    # float64 sums: 2 000 weighted rows agree with numpy's float64 far below float32's 1e-7
    assert whole["err"] == pytest.approx(float(w @ ((s > 0) != y) / w.sum()), rel=1e-14)
    assert all(isinstance(v, float) for v in whole.values())


# --------------------------------------------------------------------------- regression
@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(6, 200), weighted=st.booleans())
def test_regression_losses_equal_sklearn_per_group(seed, n, weighted):
    y, s, codes, w = _data(seed, n, real=True, weighted=weighted)
    table = GroupTable("g", NAMES, "real").evaluate(_chunks(y, s, codes, w, real=True))
    frame = _frame({"mse": mean_squared_error, "mae": mean_absolute_error}, y, s, codes, w)
    sw = np.ones(n) if w is None else w
    for k, v in enumerate(NAMES):
        row, m = table[f"g={v}"], codes == k
        assert set(row) == {"count", "share", "mean_label", "mean_prediction", "mse", "mae"}
        assert row["mse"] == pytest.approx(frame.by_group.loc[v, "mse"], rel=1e-12)
        assert row["mae"] == pytest.approx(frame.by_group.loc[v, "mae"], rel=1e-12)
        assert row["mean_label"] == pytest.approx(np.average(y[m], weights=sw[m]), rel=1e-12)
        assert row["mean_prediction"] == pytest.approx(np.average(s[m], weights=sw[m]),
                                                       rel=1e-12, abs=1e-15)
        assert row["count"] == pytest.approx(sw[m].sum(), rel=1e-12)
    summary = ExactEvaluator(R.summary_metrics("real")).evaluate(
        _batch(y, s, codes, w, real=True))
    assert summary["mse"] == pytest.approx(frame.overall["mse"], rel=1e-12)
    assert summary["mae"] == pytest.approx(frame.overall["mae"], rel=1e-12)


def test_a_real_target_refuses_classification_rates_by_name():
    y, s, codes, _ = _data(0, 30, real=True)
    with pytest.raises(RatesError, match="binary label"):
        GroupTable("g", NAMES, "binary").evaluate(_batch(y, s, codes, real=True))
    with pytest.raises(RatesError, match="label_kind"):
        GroupTable("g", NAMES, "ordinal")


# --------------------------------------------------------------------------- empty subsets
def test_an_empty_subset_raises_unless_the_metric_is_optional():
    y, s, codes, _ = _data(1, 40)
    codes = np.where(codes == 2, 0, codes)                 # group "c" absent
    tpr_c = R.true_positive_rate(group("g", "c"))
    batch = _batch(y, s, codes)
    with pytest.raises(EmptySubsetError, match="'c'"):
        ExactEvaluator({"tpr_c": tpr_c, "err": R.error_rate()}).evaluate(batch)
    out = ExactEvaluator({"tpr_c": tpr_c, "err": R.error_rate()},
                         optional=["tpr_c"]).evaluate(batch)
    assert np.isnan(out["tpr_c"]) and out["err"] == pytest.approx(np.mean((s > 0) != y))
    row = GroupTable("g", NAMES, "binary").evaluate(batch)["g=c"]
    assert row["count"] == 0.0 and row["share"] == 0.0
    assert all(row[c] is None for c in row if c not in ("count", "share"))


def test_bad_metrics_are_refused_by_name():
    with pytest.raises(RatesError, match="at least one metric"):
        ExactEvaluator({})
    with pytest.raises(RatesError, match="not metrics"):
        ExactEvaluator({"err": R.error_rate()}, optional=["f1"])
    with pytest.raises(RatesError, match="got float"):
        ExactEvaluator({"x": 0.5})
    with pytest.raises(RatesError, match="no batch"):
        ExactEvaluator({"err": R.error_rate()}).evaluate([])
