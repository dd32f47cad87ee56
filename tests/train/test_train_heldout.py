"""``trainer.constraint_split=validation|holdout`` (Cotter et al. 2019's two-dataset game in
the engine): the game's logged violations are the held-out data's (numpy), θ's minibatches do
not change, no host sync, the stratified holdout, epochs, and clear errors (resume: the
``minibatch-heldout`` case of ``test_train_engine.py``)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fairgames.data import make_synthetic
from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.rates import error_rate, group, no_host_sync, true_positive_rate
from fairgames.train import (
    BatchSettings,
    ConfigError,
    Engine,
    GameData,
    LogSettings,
    SnapshotSettings,
)
from fairgames.train.config import validate
from fairgames.train.data import constraint_holdout, load_splits, predict_scores


def _tpr_parity() -> Problem:
    tpr = [true_positive_rate(group("group", v)) for v in ("0", "1")]
    return Problem(error_rate(), [(tpr[1] >= tpr[0] - 0.05).named("gap_10"),
                                  (tpr[0] >= tpr[1] - 0.05).named("gap_01")])


def _gap(model: torch.nn.Module, ds) -> float:
    with torch.no_grad():
        pred = (model(ds.features)[:, 0] > 0).numpy()
    y, g = ds.labels.numpy() == 1, ds.groups["group"].numpy()
    return float(pred[y & (g == 0)].mean() - pred[y & (g == 1)].mean())


def _engine(splits, heldout: bool, batch_size: int | None = None, steps: int = 1):
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 1)
    copt = ConstrainedOptimizer(_tpr_parity(), torch.optim.SGD(model.parameters(), lr=0.1))
    data = GameData(splits.train, "group", heldout=splits.validation if heldout else None)
    engine = Engine(model, copt, data, steps=steps, batches=BatchSettings(size=batch_size),
                    logging=LogSettings(every=1),
                    snapshots=SnapshotSettings(every=1, max_kept=4))
    return model, engine


def test_the_logged_violations_are_the_validation_splits():
    splits = make_synthetic(n=3000, d=5, group_shift=1.5, seed=0)
    model, engine = _engine(splits, heldout=True)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    engine.run()
    after = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(start)              # θ_0: the model the first step's rates are of
    d_val, d_train = _gap(model, splits.validation), _gap(model, splits.train)
    logged = engine.history[0]["constraints"]
    assert logged["gap_10"] == pytest.approx(d_val - 0.05, abs=1e-6)
    assert logged["gap_01"] == pytest.approx(-d_val - 0.05, abs=1e-6)
    # beside them, the training batch's (the whole split: full batch) at the logged θ_1
    model.load_state_dict(after)
    d_batch = _gap(model, splits.train)
    assert engine.history[0]["constraints_batch"]["gap_10"] == pytest.approx(d_batch - 0.05,
                                                                            abs=1e-6)
    model.load_state_dict(start)
    assert abs(d_val - d_train) > 1e-3        # so the test tells the splits apart
    _, plain = _engine(splits, heldout=False)
    plain.run()
    assert plain.history[0]["constraints"]["gap_10"] == pytest.approx(d_train - 0.05, abs=1e-6)
    assert "constraints_batch" not in plain.history[0]


def test_the_training_minibatches_do_not_depend_on_the_heldout_split():
    splits = make_synthetic(n=3000, d=5, group_shift=1.5, seed=0)
    drawn = []
    for heldout in (False, True):
        _, engine = _engine(splits, heldout, batch_size=256, steps=5)
        seen = []
        engine.sampler = _Recording(engine.sampler, seen)
        engine.run()
        drawn.append(seen)
        if heldout:
            assert engine.heldout_sampler is not None
    assert len(drawn[0]) == 5
    assert all(torch.equal(a, b) for a, b in zip(*drawn, strict=True))


@pytest.mark.parametrize("batch_size", [None, 128])
def test_the_heldout_scores_carry_no_autograd_graph(batch_size):
    """The multipliers' batch is scored without gradients (``record_heldout``'s contract): no
    graph is built or kept on the held-out rows at each step."""
    splits = make_synthetic(n=1200, d=5, seed=0)
    _, engine = _engine(splits, heldout=True, batch_size=batch_size, steps=3)
    recorded, record = [], engine.copt.record_heldout

    def spy(batch):
        recorded.append((batch.scores.requires_grad, batch.scores.grad_fn))
        record(batch)

    engine.copt.record_heldout = spy
    engine.run()
    assert recorded == [(False, None)] * 3


def test_predict_scores_is_eval_mode_without_gradients_and_restores_the_flag():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Dropout(0.5),
                                torch.nn.Linear(8, 1))
    x = torch.randn(50, 5)
    model.train()
    scores = predict_scores(model, x, chunk=16)
    assert model.training and not scores.requires_grad and scores.shape == (50,)
    model.eval()
    with torch.no_grad():
        expected = model(x)[:, 0]
    torch.testing.assert_close(scores, expected)   # eval mode: dropout off, chunks joined


class _Recording:
    """A sampler that remembers what it hands out."""

    def __init__(self, sampler, seen: list) -> None:
        self.sampler, self.seen = sampler, seen
        self.balanced_by = sampler.balanced_by

    def __next__(self) -> torch.Tensor:
        index = next(self.sampler)
        self.seen.append(index.clone())
        return index


@pytest.mark.parametrize("batch_size", [None, 128])
def test_a_step_with_a_heldout_split_makes_no_host_sync(batch_size):
    splits = make_synthetic(n=1200, d=5, seed=0)
    _, engine = _engine(splits, heldout=True, batch_size=batch_size, steps=50)
    engine.train_step()          # the first step compiles the evaluation plans (host work)
    with no_host_sync():
        for _ in range(12):      # crosses an epoch boundary of both samplers
            engine.train_step()
    assert engine.step == 13


def test_constraint_split_config_errors(compose_cfg, tmp_path):
    with pytest.raises(ConfigError, match="trainer.constraint_split='test'"):
        validate(compose_cfg("trainer.constraint_split=test"))
    with pytest.raises(ConfigError, match="trainer.constraint_fraction=0.0"):
        validate(compose_cfg("trainer.constraint_split=holdout",
                             "trainer.constraint_fraction=0.0"))
    with pytest.raises(ConfigError, match="gradient θ-player"):
        validate(compose_cfg("trainer.constraint_split=validation", "algorithm=algorithm1"))
    splits = make_synthetic(n=600, d=5, seed=0)
    model = torch.nn.Linear(5, 1)
    copt = ConstrainedOptimizer(_tpr_parity(), torch.optim.SGD(model.parameters(), lr=0.1),
                                preset="algorithm1")
    with pytest.raises(ValueError, match="gradient θ-player"):
        Engine(model, copt, GameData(splits.train, "group", heldout=splits.validation),
               steps=1)


def test_a_run_on_the_two_dataset_game_logs_validation_violations(train_run):
    result = train_run("heldout", "problem=equal_opportunity",
                       "trainer.constraint_split=validation", "trainer.steps=60",
                       "trainer.log_every=60", "trainer.snapshot_every=1",
                       "trainer.max_snapshots=60", "trainer.snapshot_strategy=uniform_stride",
                       "trainer.tensorboard=true")
    assert result.results["config"]["trainer"]["constraint_split"] == "validation"
    cfg = result.results["config"]
    splits = load_splits(cfg["data"], cfg["seed"])
    assert result.results["training"]["constraint_data"] == {
        "split": "validation", "theta_rows": len(splits.train),
        "heldout_rows": len(splits.validation), "rows_file": None}
    assert not (result.run_dir / "constraint_holdout.json").exists()
    events = EventAccumulator(str(result.run_dir))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert any(t.endswith("/batch_value") for t in tags)
    assert len([t for t in tags if t.endswith("/batch_value")]) == len(
        [t for t in tags if t.startswith("constraint/") and t.endswith("/value")
         and not t.endswith("batch_value") and not t.endswith("surrogate_value")])
    # The step-60 entry holds the game's record of step 60: the validation split's
    # equal-opportunity violations at θ_59, the snapshot taken after step 59.
    engine = result.engine
    assert engine.history[-1]["step"] == 60 and engine.snapshots.steps[-2] == 59
    stacked = engine.snapshots.stacked("cpu")
    model = copy.deepcopy(result.model).cpu()
    model.load_state_dict({k: v[-2] for k, v in stacked.items()})
    cfg = result.results["config"]
    val = load_splits(cfg["data"], cfg["seed"]).validation
    with torch.no_grad():
        pred = (model(val.features).reshape(-1) > 0).numpy()
    y, g = val.labels.numpy() == 1, val.groups["group"].numpy()
    overall = pred[y].mean()
    expected = sorted(overall - pred[y & (g == k)].mean() - 0.05 for k in np.unique(g))
    logged = sorted(engine.history[-1]["constraints"].values())
    np.testing.assert_allclose(logged, expected, atol=1e-6)


# --------------------------------------------------------------------------- holdout
def test_the_constraint_holdout_partitions_training_by_group_and_label():
    train = make_synthetic(n=3000, d=5, group_shift=1.5, seed=0).train
    theta, held = constraint_holdout(train, "group", 0.3, seed=4)
    assert len(theta) + len(held) == len(train)
    assert not set(theta.tolist()) & set(held.tolist())
    y, g = train.labels.numpy(), train.groups["group"].numpy()
    for k in np.unique(g):
        for label in (0, 1):
            stratum = (g == k) & (y == label)
            assert abs(stratum[held.numpy()].sum() - 0.3 * stratum.sum()) <= 1
    again, _ = constraint_holdout(train, "group", 0.3, seed=4)
    other, _ = constraint_holdout(train, "group", 0.3, seed=5)
    assert torch.equal(theta, again) and not torch.equal(theta, other)
    with pytest.raises(ConfigError, match="constraint_fraction=1.0"):
        constraint_holdout(train, "group", 1.0, seed=0)
    tiny = train.subset(torch.cat([torch.nonzero(train.groups["group"] == 0)[:, 0],
                                   torch.nonzero(train.groups["group"] == 1)[:1, 0]]))
    with pytest.raises(ConfigError, match="have no rows in"):
        constraint_holdout(tiny, "group", 0.5, seed=0)


def test_a_holdout_run_trains_theta_on_the_rest_and_logs_the_holdouts_violations(train_run):
    result = train_run("holdout", "problem=equal_opportunity",
                       "trainer.constraint_split=holdout", "trainer.constraint_fraction=0.4",
                       "trainer.steps=40", "trainer.log_every=40", "trainer.snapshot_every=1",
                       "trainer.max_snapshots=40", "trainer.snapshot_strategy=uniform_stride")
    cfg = result.results["config"]
    train = load_splits(cfg["data"], cfg["seed"]).train
    theta_rows, held_rows = constraint_holdout(train, "group", 0.4, cfg["seed"])
    engine = result.engine
    assert torch.equal(engine.train.features, train.features[theta_rows])
    assert torch.equal(engine.heldout.features, train.features[held_rows])
    # the run records both row sets: counts in results.json, indices in the run directory
    record = result.results["training"]["constraint_data"]
    assert record == {"split": "holdout", "theta_rows": len(theta_rows),
                      "heldout_rows": len(held_rows), "rows_file": "constraint_holdout.json"}
    saved = json.loads((result.run_dir / record["rows_file"]).read_text())
    assert saved["theta_rows"] == theta_rows.tolist()
    assert saved["heldout_rows"] == held_rows.tolist()
    assert saved["indices_into"] == "train" and saved["fraction"] == 0.4
    stacked = engine.snapshots.stacked("cpu")
    model = copy.deepcopy(result.model).cpu()
    model.load_state_dict({k: v[-2] for k, v in stacked.items()})   # θ_39
    held = engine.heldout
    with torch.no_grad():
        pred = (model(held.features).reshape(-1) > 0).numpy()
    y, g = held.labels.numpy() == 1, held.groups["group"].numpy()
    expected = sorted(pred[y].mean() - pred[y & (g == k)].mean() - 0.05 for k in np.unique(g))
    np.testing.assert_allclose(sorted(engine.history[-1]["constraints"].values()), expected,
                               atol=1e-6)
    # the solutions are still evaluated on the whole training split
    counts = result.results["solutions"]["final"]["train"]["groups"]
    assert sum(v["count"] for k, v in counts.items() if k != "overall") == len(train)


def test_epochs_count_passes_over_thetas_own_rows(train_run):
    result = train_run("holdout_epochs", "problem=equal_opportunity",
                       "trainer.constraint_split=holdout", "trainer.epochs=2",
                       "trainer.batch_size=256")
    engine = result.engine
    whole = len(engine.train) + len(engine.heldout)
    assert engine.step == 2 * math.ceil(len(engine.train) / 256)
    assert engine.step < 2 * math.ceil(whole / 256)


def test_a_heldout_split_that_cannot_measure_a_rate_is_refused_before_training():
    splits = make_synthetic(n=1200, d=5, seed=0)
    val = splits.validation
    # no positive of group 1 on validation: its TPR has no example there
    labels = val.labels.clone()
    labels[val.groups["group"] == 1] = 0.0
    no_positives = dataclasses.replace(val, labels=labels)
    model = torch.nn.Linear(5, 1)
    copt = ConstrainedOptimizer(_tpr_parity(), torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="held-out split .* cannot measure the constraints: "
                                         "no example"):
        Engine(model, copt, GameData(splits.train, "group", heldout=no_positives), steps=1)


def test_the_plain_game_records_that_the_multipliers_played_on_thetas_rows(eo_run):
    cfg = eo_run.results["config"]
    train = load_splits(cfg["data"], cfg["seed"]).train
    assert eo_run.results["training"]["constraint_data"] == {
        "split": "train", "theta_rows": len(train), "heldout_rows": 0, "rows_file": None}
    assert not (eo_run.run_dir / "constraint_holdout.json").exists()
