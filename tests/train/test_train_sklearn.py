"""``fairgames.sklearn.ConstrainedClassifier``: scikit-learn's estimator checks, metadata
routing through a Pipeline and GridSearchCV, and its probabilities against the run's record
and fairlearn's demographic parity."""

from __future__ import annotations

import numpy as np
import pytest
import sklearn
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from fairgames.sklearn import ConstrainedClassifier

# Checks expected to fail, with why (none: every check runs on the class as shipped; a new
# scikit-learn check that cannot apply would be listed here with its reason).
EXPECTED_FAILED: dict[str, str] = {}


@parametrize_with_checks([ConstrainedClassifier(steps=5)],
                         expected_failed_checks=lambda est: EXPECTED_FAILED)
@pytest.mark.filterwarnings("ignore:ConstrainedClassifier.fit got no sensitive_features")
def test_scikit_learn_estimator_checks(estimator, check):
    """scikit-learn's own checks on the shipped class: they call fit(X, y) without metadata,
    which trains the objective alone (and warns)."""
    check(estimator)


def _data(n=1500, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.choice(["f", "m"], size=n, p=[0.35, 0.65])
    x = rng.normal(size=(n, 4)) + (a == "m")[:, None] * 0.8
    y = np.where(x[:, 0] + 0.5 * x[:, 1] + rng.normal(scale=0.7, size=n) > 0.6, "yes", "no")
    return x * 3.0 + 1.0, y, a


def test_probabilities_are_the_runs_and_meet_demographic_parity():
    """predict_proba's selection rates per group give the run's own recorded constraint
    values on train (the run's record and the estimator agree), and fairlearn's demographic
    parity difference of the randomised classifier is within the tolerance."""
    from fairlearn.metrics import MetricFrame, demographic_parity_difference

    x, y, a = _data()
    clf = ConstrainedClassifier("demographic_parity", tolerance=0.05, steps=300).fit(
        x, y, sensitive_features=a)
    assert clf.classes_.tolist() == ["no", "yes"]
    p = clf.predict_proba(x)[:, 1]
    rates = {g: p[a == g].mean() for g in ("f", "m")}
    recorded = clf.results_["solutions"]["recommended"]["train"]["constraints"]
    for g in ("f", "m"):       # ppr_high[g] = ppr(g) − ppr() − tolerance
        assert recorded[f"ppr_high[{g}]"]["value"] == pytest.approx(
            rates[g] - p.mean() - 0.05, abs=1e-6)
    # fairlearn's per-group means of the expected predictions: the same rates, and their gap
    # within twice the tolerance (each group within the tolerance of the overall rate)
    frame = MetricFrame(metrics=lambda yt, yp: float(np.mean(yp)), y_true=p, y_pred=p,
                        sensitive_features=a)
    assert frame.by_group.to_dict() == pytest.approx(rates, abs=1e-12)
    assert frame.difference() <= 2 * 0.05 + 1e-6
    hard = clf.predict(x)
    assert set(np.unique(hard)) <= {"no", "yes"}
    # a deterministic solution's sampled labels equal fairlearn's view of its predictions
    final = ConstrainedClassifier("demographic_parity", tolerance=0.05, steps=300,
                                  solution="final").fit(x, y, sensitive_features=a)
    labels = (final.predict(x) == "yes").astype(int)
    assert final.predict_proba(x)[:, 1].tolist() == labels.astype(float).tolist()
    fl = demographic_parity_difference(labels, labels, sensitive_features=a)
    ours = abs(labels[a == "f"].mean() - labels[a == "m"].mean())
    assert fl == pytest.approx(ours, abs=1e-12)
    assert final.score(x, y) == pytest.approx(np.mean(final.predict(x) == y))


def test_pipeline_and_grid_search_route_sensitive_features():
    x, y, a = _data(n=900, seed=1)
    with sklearn.config_context(enable_metadata_routing=True):
        clf = ConstrainedClassifier("demographic_parity", steps=40).set_fit_request(
            sensitive_features=True)
        pipe = make_pipeline(StandardScaler(), clf)
        pipe.fit(x, y, sensitive_features=a)
        assert pipe.predict_proba(x).shape == (900, 2)
        grid = GridSearchCV(pipe, {"constrainedclassifier__tolerance": [0.02, 0.1],
                                   "constrainedclassifier__lr": [0.01, 0.05]}, cv=2)
        grid.fit(x, y, sensitive_features=a)
    assert len(grid.cv_results_["params"]) == 4
    assert grid.best_params_["constrainedclassifier__tolerance"] in (0.02, 0.1)
    # the routed sensitive feature made the groups of every fitted run's constraints
    verdict = grid.best_estimator_[-1].results_["verdict"]["constraints"]
    assert set(verdict) == {"ppr_low[f]", "ppr_low[m]", "ppr_high[f]", "ppr_high[m]"}


def test_bad_input_is_named():
    x, y, a = _data(n=300)
    with pytest.raises(ValueError, match="one value per row"):
        ConstrainedClassifier(steps=5).fit(x, y, sensitive_features=a[:10])
    with pytest.raises(ValueError, match="Only binary classification"):
        ConstrainedClassifier(steps=5).fit(x, np.arange(300) % 3, sensitive_features=a)
    with pytest.raises(ValueError, match="solution="):
        ConstrainedClassifier(steps=5, solution="best").fit(x, y, sensitive_features=a)


def test_without_sensitive_features_the_objective_alone_is_trained_and_no_constraint_is_met():
    from sklearn.linear_model import LogisticRegression

    x, y, _ = _data(n=800, seed=4)
    with pytest.warns(UserWarning, match="no sensitive_features"):
        clf = ConstrainedClassifier("demographic_parity", steps=300, lr=0.05).fit(x, y)
    verdict = clf.results_["verdict"]["constraints"]
    assert set(verdict) == {"ppr_low", "ppr_high"}     # the problem's constraint families
    assert {v["status"] for v in verdict.values()} == {"not_applicable"}
    assert all("sensitive_features" in v["verdict"] for v in verdict.values())
    # the objective alone: as accurate on train as scikit-learn's own logistic regression
    reference = LogisticRegression().fit(x, y).score(x, y)
    assert clf.score(x, y) >= reference - 0.02


def test_sensitive_features_the_cli_refuses_are_refused():
    x, y, a = _data(n=300)
    with pytest.raises(ValueError, match="single value 'f'"):
        ConstrainedClassifier(steps=5).fit(x, y, sensitive_features=np.full(300, "f"))
    with_nan = np.where(np.arange(300) % 7 == 0, np.nan, (a == "m").astype(float))
    with pytest.raises(ValueError, match="43 missing value"):
        ConstrainedClassifier(steps=5).fit(x, y, sensitive_features=with_nan)
    with_none = np.where(np.arange(300) < 2, None, a).astype(object)
    with pytest.raises(ValueError, match="2 missing value"):
        ConstrainedClassifier(steps=5).fit(x, y, sensitive_features=with_none)
    continuous = np.random.default_rng(0).normal(size=300)
    with pytest.raises(ValueError, match="300 distinct values.*max_groups=20"):
        ConstrainedClassifier(steps=5).fit(x, y, sensitive_features=continuous)
    quartile = np.digitize(continuous, np.quantile(continuous, [0.25, 0.5, 0.75]))
    clf = ConstrainedClassifier(steps=5, max_groups=3)
    with pytest.raises(ValueError, match="4 distinct values.*max_groups=3"):
        clf.fit(x, y, sensitive_features=quartile)
    clf.set_params(max_groups=4).fit(x, y, sensitive_features=quartile)
    assert len(clf.results_["verdict"]["constraints"]) == 8


def test_no_test_figures_from_training_rows():
    x, y, a = _data(n=600)
    clf = ConstrainedClassifier(steps=20).fit(x, y, sensitive_features=a)
    for solution in clf.results_["solutions"].values():
        assert solution["train"] is not None
        assert solution["validation"] is None and solution["test"] is None
    for v in clf.results_["verdict"]["constraints"].values():
        assert v["test"] is None
        assert v["values"]["test"] is None and v["intervals"]["test"] is None
        assert v["status"] != "met"           # met on train is not a verdict on new rows
    held = ConstrainedClassifier(steps=20, validation_fraction=0.3).fit(
        x, y, sensitive_features=a)
    assert held.results_["solutions"]["recommended"]["validation"] is not None


def test_advice_speaks_the_estimators_parameters():
    x, y, a = _data(n=600)
    clf = ConstrainedClassifier(tolerance=0.001, steps=3, lr=0.001).fit(
        x, y, sensitive_features=a)
    texts = [v["verdict"] for v in clf.results_["verdict"]["constraints"].values()
             if v["status"] == "not_met"]
    assert texts                               # three tiny steps miss a 0.001 tolerance
    for text in texts:
        assert "steps=6" in text and "tolerance=" in text
        assert "trainer." not in text and "problem." not in text


def test_decision_function_sparse_input_and_text_columns():
    import pandas as pd
    import scipy.sparse

    x, y, a = _data(n=500)
    final = ConstrainedClassifier(steps=40, solution="final").fit(x, y, sensitive_features=a)
    margin = final.decision_function(x)
    assert margin.shape == (500,)
    assert np.array_equal(final.classes_[(margin > 0).astype(int)], final.predict(x))
    mixture = ConstrainedClassifier(steps=40, solution="stochastic").fit(
        x, y, sensitive_features=a)
    assert mixture.predictor_.is_mixture
    assert np.allclose(mixture.decision_function(x), mixture.predict_proba(x)[:, 1] - 0.5)
    # sparse input is densified: the same run and predictions as the dense array
    xs = scipy.sparse.csr_matrix(np.where(np.abs(x) > 2.0, x, 0.0))
    dense = ConstrainedClassifier(steps=40).fit(xs.toarray(), y, sensitive_features=a)
    sparse = ConstrainedClassifier(steps=40).fit(xs, y, sensitive_features=a)
    assert np.array_equal(sparse.predict_proba(xs), dense.predict_proba(xs.toarray()))
    frame = pd.DataFrame({"x0": x[:, 0], "job": np.where(x[:, 1] > 0, "a", "b")})
    with pytest.raises(ValueError, match="OneHotEncoder"):
        ConstrainedClassifier(steps=5).fit(frame, y, sensitive_features=a)


def test_a_pickle_round_trip_and_its_version_check():
    import pickle

    import fairgames.sklearn as module

    x, y, a = _data(n=400)
    clf = ConstrainedClassifier(steps=30).fit(x, y, sensitive_features=a)
    again = pickle.loads(pickle.dumps(clf))
    assert np.array_equal(again.predict_proba(x), clf.predict_proba(x))
    assert np.array_equal(again.predict(x), clf.predict(x))
    state = clf.__getstate__()
    assert state["_fairgames_version"] == module.fairgames_version()
    state["_fairgames_version"] = "0.0.1"
    other = ConstrainedClassifier.__new__(ConstrainedClassifier)
    with pytest.warns(UserWarning, match="fairgames 0.0.1.*this is fairgames"):
        other.__setstate__(state)


def test_sample_weight_counts_rows_and_the_rates_are_weighted():
    """Whole-number weights are frequency weights: the run equals one on the rows repeated
    (scikit-learn's own equivalence check runs in the estimator checks above), and the
    recorded constraint values are numpy's weighted rates of predict_proba."""
    x, y, a = _data(n=500, seed=5)
    w = np.random.default_rng(5).integers(0, 4, size=500)
    weighted = ConstrainedClassifier(steps=60).fit(x, y, sensitive_features=a,
                                                   sample_weight=w)
    repeated = ConstrainedClassifier(steps=60).fit(np.repeat(x, w, axis=0), np.repeat(y, w),
                                                   sensitive_features=np.repeat(a, w))
    assert np.array_equal(weighted.predict_proba(x), repeated.predict_proba(x))
    p = weighted.predict_proba(x)[:, 1]
    overall = np.average(p, weights=w)
    recorded = weighted.results_["solutions"]["recommended"]["train"]["constraints"]
    for g in ("f", "m"):       # ppr_high[g] = ppr(g) − ppr() − tolerance, weighted
        rate = np.average(p[a == g], weights=w[a == g])
        assert recorded[f"ppr_high[{g}]"]["value"] == pytest.approx(rate - overall - 0.05,
                                                                    abs=1e-6)
    with pytest.raises(ValueError, match="whole numbers"):
        ConstrainedClassifier(steps=5).fit(x, y, sensitive_features=a,
                                           sample_weight=np.full(500, 0.5))
