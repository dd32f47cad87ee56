"""Baselines against independent references: brute-force threshold searches, sklearn's
F-measure, scipy's LP; and their errors on bad input. All fast (well under a second each)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy.optimize import linprog
from sklearn.metrics import f1_score

from fairgames.baselines import (
    COCO,
    BaselineError,
    Confusion,
    LogisticRegression,
    PluginF1,
    PostShift,
    best_f1_threshold,
    kld,
)


def _problem(n=600, seed=0):
    rng = np.random.default_rng(seed)
    g = (rng.random(n) < 0.35).astype(np.int64)
    x = rng.normal(size=(n, 3)) - 0.8 * g[:, None]
    eta = 1 / (1 + np.exp(-(1.5 * x[:, 0] + x[:, 1])))
    y = (rng.random(n) < eta).astype(np.float64)
    return x, y, g, eta


# --------------------------------------------------------------------------- PostShift
def test_postshift_thresholds_match_brute_force():
    _, y, g, eta = _problem()
    ps = PostShift().fit(torch.tensor(eta), torch.tensor(g), torch.tensor(y))
    p = y.mean()
    for grp in (0, 1):
        s = eta[g == grp]
        # brute force: every threshold at a score or just below the minimum
        cands = np.concatenate([[s.min() - 1], np.sort(s)])
        gaps = [abs((s > t).mean() - p) for t in cands]
        got = (s > float(ps.thresholds[grp])).mean()
        assert abs(got - p) == pytest.approx(min(gaps), abs=1e-12)
    pred = ps.predict(eta, g).numpy()
    for grp in (0, 1):
        assert abs(pred[g == grp].mean() - p) <= 1.0 / (g == grp).sum() + 1e-12


def test_postshift_explicit_targets_and_kld():
    _, y, g, eta = _problem(seed=1)
    ps = PostShift().fit(eta, g, target_rates=[0.2, 0.7])
    pred = ps.predict(eta, g).numpy()
    assert pred[g == 0].mean() == pytest.approx(0.2, abs=0.01)
    assert pred[g == 1].mean() == pytest.approx(0.7, abs=0.01)
    base = PostShift().fit(eta, g, y).predict(eta, g).numpy()
    kl = sum(float(kld(y.mean(), torch.tensor(base[g == k].mean()))) for k in (0, 1))
    assert kl < 1e-3


def test_postshift_bad_input():
    with pytest.raises(BaselineError, match="labels"):
        PostShift().fit([0.1, 0.2], [0, 1])
    with pytest.raises(BaselineError, match="NaN"):
        PostShift().fit([0.1, float("nan")], [0, 1], [0, 1])
    with pytest.raises(BaselineError, match="no rows"):
        PostShift().fit([0.1, 0.2], [0, 2], [0, 1])
    with pytest.raises(BaselineError, match="rows"):
        PostShift().fit([0.1, 0.2, 0.3], [0, 1], [0, 1, 1])
    with pytest.raises(BaselineError, match="not fitted"):
        PostShift().predict([0.1], [0])
    with pytest.raises(BaselineError, match=r"\[0, 1\]"):
        PostShift().fit([0.1, 0.2], [0, 1], target_rates=[0.5, 1.5])
    ps = PostShift().fit([0.1, 0.2], [0, 1], [0, 1])
    with pytest.raises(BaselineError, match="codes"):
        ps.predict([0.1], [5])


# --------------------------------------------------------------------------- plug-in F1
def test_best_f1_threshold_matches_sklearn_scan():
    _, y, _, eta = _problem(n=400, seed=2)
    eta = np.round(eta, 2)                       # ties included
    t, f = best_f1_threshold(eta, y)
    scan = max(f1_score(y, (eta > c).astype(int), zero_division=0)
               for c in np.concatenate([[-1.0], np.unique(eta)]))
    assert f == pytest.approx(scan, abs=1e-12)
    assert f1_score(y, (eta > t).astype(int)) == pytest.approx(f, abs=1e-12)


def test_plugin_f1_beats_half_threshold_and_errors():
    x, y, _, _ = _problem(n=800, seed=3)
    y = y * (np.random.default_rng(0).random(len(y)) < 0.4)    # rare positives
    clf = PluginF1().fit(x, y)
    pred = clf.predict(x).numpy()
    eta = clf.predict_proba(x).numpy()
    assert f1_score(y, pred) >= f1_score(y, (eta > 0.5).astype(int)) - 1e-12
    assert f1_score(y, pred) == pytest.approx(clf.fmeasure, abs=1e-12)
    with pytest.raises(BaselineError, match="no positive"):
        best_f1_threshold([0.1, 0.2], [0, 0])
    with pytest.raises(BaselineError, match="0/1"):
        PluginF1().fit(x[:3], [0, 2, 1])
    with pytest.raises(BaselineError, match="not fitted"):
        PluginF1().predict(x)
    with pytest.raises(BaselineError, match="both"):
        PluginF1().fit(x, y, tune_features=x)


def test_logistic_matches_sklearn():
    from sklearn.linear_model import LogisticRegression as SkLR

    x, y, _, _ = _problem(n=500, seed=4)
    ours = LogisticRegression(l2=1e-2).fit(x, y).predict_proba(x).numpy()
    # sklearn's C multiplies the summed loss: C = 1 / (n · l2) for our mean-loss penalty
    sk = SkLR(C=1 / (500 * 1e-2), tol=1e-10, max_iter=1000).fit(x, y).predict_proba(x)[:, 1]
    np.testing.assert_allclose(ours, sk, atol=1e-5)
    with pytest.raises(BaselineError, match="matrix"):
        LogisticRegression().fit(y, y)
    with pytest.raises(BaselineError, match="columns"):
        LogisticRegression().fit(x, y).predict_proba(x[:, :2])


# --------------------------------------------------------------------------- COCO
def _cells():
    """A finite domain: 6 cells per group with exact proportions of positives."""
    etas = [[0.2, 0.4, 0.55, 0.7, 0.85, 0.95], [0.05, 0.15, 0.25, 0.4, 0.6, 0.8]]
    sizes = [[20, 20, 20, 20, 20, 20], [10, 10, 10, 10, 10, 10]]
    eta, y, g, cell = [], [], [], []
    k = 0
    for grp in (0, 1):
        for e, m in zip(etas[grp], sizes[grp], strict=True):
            pos = round(e * m)
            eta += [e] * m
            y += [1.0] * pos + [0.0] * (m - pos)
            g += [grp] * m
            cell += [k] * m
            k += 1
    return np.array(eta), np.array(y), np.array(g), np.array(cell)


def test_coco_matches_lp_on_a_finite_domain():
    eta, y, g, cell = _cells()
    n, k = len(y), cell.max() + 1
    share = np.bincount(cell, minlength=k) / n
    pos = np.bincount(cell, weights=y, minlength=k) / n         # P(y = 1, cell)
    grp = np.array([g[cell == c][0] for c in range(k)])
    pi = np.array([share[grp == j].sum() for j in (0, 1)])
    # LP over randomised per-cell decisions h_c: error = Σ pos_c (1 − h_c) + (share − pos)_c h_c
    cost = (share - pos) - pos
    ppr = np.stack([np.where(grp == j, share / pi[j], 0.0) for j in (0, 1)])
    tol = 0.05
    a_ub = np.stack([ppr[0] - ppr[1], ppr[1] - ppr[0]])
    lp = linprog(cost, A_ub=a_ub, b_ub=[tol, tol], bounds=(0, 1), method="highs")
    lp_error = lp.fun + pos.sum()

    def parity(c: Confusion) -> torch.Tensor:
        return c.positive_rate(0) - c.positive_rate(1)

    coco = COCO(lambda c: c.error(), [lambda c: parity(c) - tol, lambda c: -parity(c) - tol],
                outer_steps=400, inner_steps=2, multiplier_lr=0.5).fit(eta, y, g)
    c = coco.confusion(eta, y, g)
    assert float(c.error()) == pytest.approx(lp_error, abs=0.01)
    assert lp_error > float(coco.initial_confusion.error()) + 0.01     # the constraint binds
    assert abs(float(parity(c))) <= tol + 0.01
    # unconstrained η > 1/2 violates the constraint: COCO had something to do
    assert abs(float(parity(coco.initial_confusion))) > tol + 0.1


def test_coco_kld_meets_error_bound_and_improves():
    _, y, g, eta = _problem(n=1500, seed=5)
    p = y.mean()

    def kld_sum(c: Confusion) -> torch.Tensor:
        return kld(p, c.positive_rate(0)) + kld(p, c.positive_rate(1))

    base_error = float(((eta > 0.5) != y).mean())
    bound = 1.1 * base_error
    coco = COCO(kld_sum, [lambda c: c.error() - bound], outer_steps=150,
                multiplier_lr=5.0).fit(eta, y, g)
    c = coco.confusion(eta, y, g)
    assert float(c.error()) <= bound + 0.005
    assert float(kld_sum(c)) < 0.5 * float(kld_sum(coco.initial_confusion))
    probs = coco.predict_proba(eta, g)
    assert probs.min() >= 0 and probs.max() <= 1
    assert float(coco.weights.sum()) == pytest.approx(1.0)


def test_coco_bad_input():
    with pytest.raises(BaselineError, match="callables"):
        COCO("kld")
    with pytest.raises(BaselineError, match=">= 1"):
        COCO(lambda c: c.error(), outer_steps=0)
    with pytest.raises(BaselineError, match="probabilities"):
        COCO(lambda c: c.error()).fit([0.2, 1.5], [0, 1], [0, 1])
    with pytest.raises(BaselineError, match="not fitted"):
        COCO(lambda c: c.error()).predict_proba([0.5], [0])
    coco = COCO(lambda c: c.error(), outer_steps=2).fit([0.2, 0.7], [0, 1], [0, 1])
    with pytest.raises(BaselineError, match="codes"):
        coco.predict_proba([0.5], [3])


def test_confusion_helpers():
    c = Confusion.from_tensor(torch.tensor([[0.1, 0.1, 0.1, 0.2], [0.2, 0.0, 0.1, 0.2]]))
    assert float(c.share(0)) == pytest.approx(0.5)
    assert float(c.error()) == pytest.approx(0.3)
    assert float(c.positive_rate(1)) == pytest.approx(0.4)
    assert float(c.base_rate()) == pytest.approx(0.5)
    assert float(c.fmeasure(0)) == pytest.approx(0.2 / 0.4)
    for a, b in itertools.product((0.2, 0.5), (0.3, 0.9)):
        ref = a * np.log(a / b) + (1 - a) * np.log((1 - a) / (1 - b))
        assert float(kld(a, torch.tensor(b, dtype=torch.float64))) == pytest.approx(ref)
