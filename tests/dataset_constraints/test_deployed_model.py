"""A deployed model given to a churn problem (paper 001, issue 47): its feature names are
checked against the data's (issue 54's saved-model contract, fairgames.train.deploy.contract),
its preprocessing spec must be beside it, and a column of the data may hold its predictions
(``problem.baseline_column``)."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
import torch

from fairgames.data import DataError
from fairgames.train import ConfigError, run
from fairgames.train.deploy.contract import check_features

SHORT = ["trainer=smoke", "trainer.steps=20", "trainer.bootstrap=0", "trainer.plots=false"]
COLUMNS = ["age", "hours", "score", "sex", "y"]


def _table(n: int = 500, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    age, hours, score = rng.normal(40, 10, n), rng.normal(38, 8, n), rng.normal(0, 1, n)
    sex = rng.choice(["f", "m"], n)
    p = 1 / (1 + np.exp(-(0.1 * (age - 40) + 1.5 * score)))
    return pd.DataFrame({"age": age, "hours": hours, "score": score, "sex": sex,
                         "y": (rng.random(n) < p).astype(int)})


def _data(path) -> list[str]:
    return ["data=table", f"data.path={path}", "data.target=y", "data.protected=sex",
            "data.numerical=[age,hours,score]"]


@pytest.fixture(scope="module")
def deployed(compose_cfg, tmp_path_factory):
    """A table, and an earlier run's unconstrained model trained on it (the deployed model)."""
    root = tmp_path_factory.mktemp("deployed")
    _table().to_csv(root / "t.csv", index=False)
    run(compose_cfg(*_data(root / "t.csv"), "problem=error", *SHORT), run_dir=root / "base")
    return root


def test_check_features_names_what_differs():
    check_features(["a", "b"], ["a", "b"], "m")
    check_features(None, ["a"], "m")                  # names not recorded: width only
    with pytest.raises(DataError, match=r"same 2 feature columns in another order: column 0 "
                                        r"is 'a' there but 'b' here"):
        check_features(["a", "b"], ["b", "a"], "m")
    with pytest.raises(DataError, match=r"missing here 'b'; not the model's 'c'"):
        check_features(["a", "b"], ["a", "c"], "m")


def test_a_baseline_of_the_same_columns_in_another_order_is_refused(deployed, compose_cfg):
    """Issue 54: a baseline trained on the same columns in another order was accepted (only the
    width was checked) and scored the swapped columns with the wrong weights."""
    table = _table()
    moved = deployed / "moved.csv"
    table[["score", "hours", "age", "sex", "y"]].to_csv(moved, index=False)
    cfg = compose_cfg(*_data(moved), "data.numerical=[score,hours,age]", "problem=churn",
                      f"problem.baseline_path={deployed / 'base'}", *SHORT)
    with pytest.raises(ConfigError, match=r"problem.baseline_path=.*same 3 feature columns in "
                                          r"another order: column 0 is 'age' there but "
                                          r"'score' here"):
        run(cfg, run_dir=deployed / "moved_run")


def test_a_baseline_of_other_columns_of_the_same_width_is_refused(deployed, compose_cfg):
    other = deployed / "other.csv"
    _table().rename(columns={"hours": "income"}).to_csv(other, index=False)
    cfg = compose_cfg(*_data(other), "data.numerical=[age,income,score]", "problem=churn",
                      f"problem.baseline_path={deployed / 'base'}", *SHORT)
    with pytest.raises(ConfigError, match=r"missing here 'hours'; not the model's 'income'"):
        run(cfg, run_dir=deployed / "other_run")


def test_a_baseline_without_its_preprocessing_spec_is_refused(deployed, compose_cfg, tmp_path):
    copy = tmp_path / "base"
    shutil.copytree(deployed / "base", copy)
    (copy / "preprocess.json").unlink()
    cfg = compose_cfg(*_data(deployed / "t.csv"), "problem=churn",
                      f"problem.baseline_path={copy}", *SHORT)
    with pytest.raises(ConfigError, match=r"preprocessing spec .*preprocess.json is missing"):
        run(cfg, run_dir=tmp_path / "run")


def test_the_same_columns_in_the_same_order_are_accepted(deployed, compose_cfg, tmp_path):
    cfg = compose_cfg(*_data(deployed / "t.csv"), "problem=churn",
                      f"problem.baseline_path={deployed / 'base'}", *SHORT)
    res = run(cfg, run_dir=tmp_path / "run")
    assert res.results["training"]["baseline"]["source"] == str(deployed / "base")
    assert torch.is_tensor(res.extras["baseline_model"](torch.zeros(1, 3)))


def test_load_run_data_splits_refuses_a_table_whose_columns_moved(compose_cfg, tmp_path):
    """Where load_run meets data again (LoadedRun.data_splits): the run's table file rewritten
    with its columns in another order re-encodes the features in that order, which the run's
    models would read with the wrong weights."""
    from fairgames.train.deploy.load import load_run

    path = tmp_path / "t.csv"
    _table().to_csv(path, index=False)
    run(compose_cfg("data=table", f"data.path={path}", "data.target=y", "data.protected=sex",
                    "problem=error", *SHORT), run_dir=tmp_path / "run")
    loaded = load_run(tmp_path / "run")
    assert loaded.data_splits().train.feature_names == loaded.record["features"]
    _table()[["score", "hours", "age", "sex", "y"]].to_csv(path, index=False)
    with pytest.raises(DataError, match=r"in .*run was trained on the same 3 feature columns "
                                        r"in another order"):
        loaded.data_splits()
