"""A constraint's subset (a group) with no row on a split: over the training split an error
before the first step, naming the split and the subset; over validation or test the run
finishes, writes results.json and its verdict says where the constraint is undefined."""

from __future__ import annotations

import importlib
import json

import pytest
import torch

from fairgames.data import DatasetSplits, make_synthetic
from fairgames.rates import EmptySubsetError
from fairgames.train import fit
from fairgames.train.loop.engine import Engine

TRAINER = {"steps": 20, "log_every": 10, "snapshot_every": 5, "bootstrap": 50}


def _without_group_1(split: str) -> DatasetSplits:
    """Synthetic splits whose ``split`` has no row of group 1 (the others keep theirs)."""
    s = make_synthetic(n=900, d=4, seed=0)
    parts = dict(s.items())
    ds = parts[split]
    parts[split] = ds.subset(torch.nonzero(ds.groups["group"] == 0).flatten())
    assert int((parts[split].groups["group"] == 1).sum()) == 0 < len(parts[split])
    return DatasetSplits(**parts, metadata=s.metadata)


def _fit(splits: DatasetSplits, problem: str, run_dir=None):
    torch.manual_seed(0)
    return fit(torch.nn.Linear(4, 1), problem, splits, protected="group", trainer=TRAINER,
               run_dir=run_dir)


@pytest.mark.parametrize("problem, reader, subset", [
    ("equal_opportunity", "constraint 'tpr[1]'", "(group('group', '1') & label(1))"),
    ("kld_error", "the objective", "group('group', '1')"),   # before its helper model too
])
def test_a_subset_empty_over_the_training_split_is_refused_before_any_step(
        monkeypatch, problem, reader, subset):
    def no_step(*args, **kwargs):
        raise AssertionError("a training step ran")

    monkeypatch.setattr(Engine, "train_step", no_step)
    # the helpers stage trains the unconstrained model of kld_error
    monkeypatch.setattr(importlib.import_module("fairgames.train.helpers"),
                        "train_unconstrained", no_step)
    splits = _without_group_1("train")
    with pytest.raises(EmptySubsetError) as info:
        _fit(splits, problem)
    msg = str(info.value)
    assert msg.startswith(f"the training split ({len(splits.train)} rows) has no row")
    assert f"{reader}: {subset}" in msg
    assert f"'group' counts: {{'0': {len(splits.train)}, '1': 0}}" in msg


def test_a_group_missing_from_test_gives_undefined_on_test_and_results(tmp_path):
    result = _fit(_without_group_1("test"), "equal_opportunity", tmp_path)
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["verdict"] == json.loads(json.dumps(result.results["verdict"]))
    verdict = written["verdict"]["constraints"]
    v = verdict["tpr[1]"]
    assert v["values"]["test"] is None
    assert v["values"]["train"] is not None
    # read from train first: a train violation is never hidden by the missing test group
    if v["values"]["train"] > 1e-6:
        assert v["status"] == "not_met"
        assert v["verdict"].startswith("NOT met on train") and v["verdict"].endswith(
            "(undefined on test)")
    else:
        assert (v["status"], v["verdict"]) == ("undefined", "undefined on test")
    assert verdict["tpr[0]"]["status"] != "undefined"          # group 0 is measured
    for solution in written["solutions"].values():
        test = solution["test"]["constraints"]
        assert test["tpr[1]"]["value"] is None and test["tpr[1]"]["violation"] is None
        assert test["tpr[0]"]["value"] is not None
    report = (tmp_path / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| tpr[1] | "))
    assert row.startswith(f"| tpr[1] | {v['verdict']} |"), row


def test_a_group_missing_from_validation_selects_on_train(tmp_path):
    with pytest.warns(UserWarning, match=r"trainer.selection_split='validation': constraint "
                                         r"'tpr\[1\]' undefined on the validation split"):
        result = _fit(_without_group_1("validation"), "equal_opportunity", tmp_path)
    assert (tmp_path / "results.json").is_file()
    assert result.results["training"]["best_iterate"]["split"] == "train"
    v = result.results["verdict"]["constraints"]["tpr[1]"]
    assert v["status"] != "undefined" and v["verdict"].endswith("(undefined on validation)")
    assert result.results["verdict"]["constraints"]["tpr[0]"]["verdict"].find("undefined") < 0
