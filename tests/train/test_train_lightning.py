"""``fairgames.lightning.ConstrainedModule``: the game inside a CPU Lightning ``Trainer``
meets a TPR-parity constraint that unconstrained training misses (synthetic data)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from needs import unavailable
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:                  # the lightning extra; the test extra installs it
    unavailable("lightning is not installed (pip install 'fairgames[lightning]')",
                allow_module_level=True)

from fairgames.data import make_synthetic  # noqa: E402
from fairgames.game import Problem  # noqa: E402
from fairgames.lightning import ConstrainedModule  # noqa: E402
from fairgames.problems import ProblemSpec  # noqa: E402

TOL = 0.03


class Classifier(ConstrainedModule):
    def __init__(self, problem, dim):
        super().__init__(problem, lambda p: torch.optim.Adam(p, lr=0.05))
        self.net = torch.nn.Linear(dim, 1)

    def forward(self, x):
        return self.net(x).squeeze(-1)

    def rates_batch(self, batch):
        x, y, g = batch       # the groups' value names: declared on the problem
        return self.game.batch(self(x), y, groups={"group": g})


def _tpr_gaps(model, ds):
    with torch.no_grad():
        hit = (model(ds.features) > 0).numpy()
    y, g = ds.labels.numpy() > 0.5, ds.groups["group"].numpy()
    overall = hit[y].mean()
    return [overall - hit[y & (g == k)].mean() for k in np.unique(g)]


def _train(problem, splits, steps=150):
    torch.manual_seed(0)
    train = splits.train
    model = Classifier(problem, train.num_features)
    data = TensorDataset(train.features, train.labels, train.groups["group"])
    loader = DataLoader(data, batch_size=len(data))           # full batch: one step an epoch
    trainer = pl.Trainer(max_epochs=steps, accelerator="cpu", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, log_every_n_steps=25)
    trainer.fit(model, loader)
    return model


def test_the_game_in_a_lightning_trainer_meets_tpr_parity():
    splits = make_synthetic(n=3000, d=6, group_shift=1.5, seed=0)
    spec = ProblemSpec("eo", "error()",
                       {"tpr": "for g in groups: tpr(group=g) >= tpr() - tolerance"},
                       tolerance=TOL, tolerance_kind="difference")
    built = spec.build("group", splits.train.group_names)
    names = built.group_values
    constrained = _train(Problem(built.objective, built.constraints, group_values=names), splits)
    unconstrained = _train(Problem(built.objective, [], group_values=names), splits)
    assert max(_tpr_gaps(unconstrained, splits.train)) > TOL + 0.02     # the problem binds
    assert constrained.game.steps >= 150                     # the game played every step
    assert max(_tpr_gaps(constrained, splits.train)) <= TOL + 0.01
    assert all(v >= 0 for v in constrained.game.multipliers_by_name().values())


# ---------------------------------------------------------------- loggers, validation, resume
def _problem(splits):
    spec = ProblemSpec("eo", "error()",
                       {"tpr": "for g in groups: tpr(group=g) >= tpr() - tolerance"},
                       tolerance=TOL, tolerance_kind="difference")
    built = spec.build("group", splits.train.group_names)
    return Problem(built.objective, built.constraints, group_values=built.group_values)


def _loader(ds, batch_size):
    data = TensorDataset(ds.features, ds.labels, ds.groups["group"])
    return DataLoader(data, batch_size=batch_size, shuffle=False)


class _ErrorBeforeEachStep(pl.Callback):
    """An independent reference: numpy's error rate of the model on the step's batch, taken
    before the step (the game's record of a step is of the θ it starts from)."""

    def __init__(self):
        self.error = {}

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        x, y, _ = batch
        with torch.no_grad():
            hit = (module(x) > 0).numpy()
        self.error[trainer.global_step] = float(np.mean(hit != (y.numpy() > 0.5)))


def _csv_rows(logger):
    import csv
    with open(f"{logger.log_dir}/metrics.csv") as f:
        return list(csv.DictReader(f))


def test_game_values_reach_tensorboard_and_csv_at_lightnings_default_interval(tmp_path):
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    splits = make_synthetic(n=1200, d=4, group_shift=1.5, seed=1)
    torch.manual_seed(0)
    model = Classifier(_problem(splits), splits.train.num_features)
    reference = _ErrorBeforeEachStep()
    tb, csv = TensorBoardLogger(tmp_path, name="tb"), CSVLogger(tmp_path, name="csv")
    trainer = pl.Trainer(max_steps=120, accelerator="cpu", logger=[tb, csv],
                         callbacks=[reference], enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    assert trainer.log_every_n_steps == 50                     # Lightning's default
    trainer.fit(model, _loader(splits.train, 100))              # 120 steps over 15 epochs
    rows = [r for r in _csv_rows(csv) if r.get("game/objective")]
    assert [int(r["step"]) for r in rows] == [49, 99]           # Lightning's flush steps
    for r in rows:
        assert float(r["game/objective"]) == pytest.approx(reference.error[int(r["step"])],
                                                           abs=1e-6)
        assert float(r["game/max_constraint"]) > -1.0
        lam = [k for k in r if k.startswith("game/lambda/")]
        assert lam and all(float(r[k]) >= 0.0 for k in lam)
    events = EventAccumulator(tb.log_dir)
    events.Reload()
    scalars = events.Scalars("game/objective")
    assert [s.step for s in scalars] == [49, 99]
    assert [s.value for s in scalars] == pytest.approx(
        [reference.error[49], reference.error[99]], abs=1e-6)
    assert any(t.startswith("game/lambda/") for t in events.Tags()["scalars"])


@pytest.mark.parametrize("accelerator", [
    "cpu", pytest.param("gpu", marks=[pytest.mark.gpu, pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA device")])])
def test_logging_the_game_makes_no_host_sync_between_flushes(tmp_path, accelerator):
    """On a GPU no_host_sync() also sets CUDA's sync debug mode to "error"."""
    from lightning.pytorch.loggers import CSVLogger

    from fairgames.rates.guards import no_host_sync

    class Guarded(Classifier):
        def on_train_batch_end(self, outputs, batch, batch_idx):
            with no_host_sync():               # raises on any .item()/float() of a tensor
                super().on_train_batch_end(outputs, batch, batch_idx)

    splits = make_synthetic(n=400, d=4, group_shift=1.5, seed=1)
    model = Guarded(_problem(splits), splits.train.num_features)
    trainer = pl.Trainer(max_steps=8, accelerator=accelerator, devices=1,
                         logger=CSVLogger(tmp_path),
                         log_every_n_steps=3, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, _loader(splits.train, 50))
    assert model.game.steps == 8


def _val_reference(model, ds):
    """numpy's error rate and TPR constraint values g = tpr() − tol − tpr(group) on a split."""
    with torch.no_grad():
        hit = (model(ds.features) > 0).numpy()
    y, g = ds.labels.numpy() > 0.5, ds.groups["group"].numpy()
    out = {"objective": float(np.mean(hit != y))}
    for k, name in enumerate(ds.group_names["group"]):
        out[name] = float(hit[y].mean() - TOL - hit[y & (g == k)].mean())
    return out


def _fit(splits, tmp_path, name, epochs, val=True, ckpt_path=None):
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    torch.manual_seed(0)
    model = Classifier(_problem(splits), splits.train.num_features)
    trainer = pl.Trainer(max_epochs=epochs, accelerator="cpu", log_every_n_steps=5,
                         logger=[CSVLogger(tmp_path, name=name),
                                 TensorBoardLogger(tmp_path, name=name + "_tb")],
                         default_root_dir=tmp_path / name, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(model, _loader(splits.train, 150),
                _loader(splits.validation, 200) if val else None, ckpt_path=ckpt_path)
    return model, trainer


def test_validate_test_predict_and_resume_with_real_loggers(tmp_path):
    splits = make_synthetic(n=1200, d=4, group_shift=1.5, seed=2)
    with_val, trainer = _fit(splits, tmp_path, "with_val", epochs=6)
    without, _ = _fit(splits, tmp_path, "without", epochs=6, val=False)
    # validation touched nothing of the game: the same θ and λ as a run without it
    assert with_val.game.steps == without.game.steps == 6 * len(_loader(splits.train, 150))
    assert torch.equal(with_val.game.weights()[1], without.game.weights()[1])
    for a, b in zip(with_val.parameters(), without.parameters(), strict=True):
        assert torch.equal(a, b)
    lam_before = with_val.game.weights()[1].clone()
    # validate / test: the problem's true values on the whole split (numpy's reference)
    for split, stage in ((splits.validation, "validate"), (splits.test, "test")):
        prefix = "val" if stage == "validate" else "test"
        (metrics,) = getattr(trainer, stage)(with_val, _loader(split, 170))
        expected = _val_reference(with_val, split)
        assert metrics[f"{prefix}/objective"] == pytest.approx(expected["objective"], abs=1e-6)
        names = [n for n in with_val.game.problem.constraint_names]
        for name, group_name in zip(names, split.group_names["group"], strict=True):
            assert metrics[f"{prefix}/constraint/{name}"] == pytest.approx(
                expected[group_name], abs=1e-6)
        assert metrics[f"{prefix}/max_constraint"] == pytest.approx(
            max(expected[g] for g in split.group_names["group"]), abs=1e-6)
    assert torch.equal(with_val.game.weights()[1], lam_before)
    # the validation rows of the CSV log are the fit's per-epoch evaluations
    rows = [r for r in _csv_rows(trainer.loggers[0]) if r.get("val/objective")]
    assert len(rows) >= 6
    # predict: the model's scores for every row, in order
    scores = torch.cat(trainer.predict(with_val, _loader(splits.test, 170)))
    with torch.no_grad():
        assert torch.equal(scores, with_val(splits.test.features))
    # resume from the checkpoint Lightning wrote after epoch 3: exact
    half, half_trainer = _fit(splits, tmp_path, "half", epochs=3)
    ckpt = half_trainer.checkpoint_callback.best_model_path
    assert ckpt
    resumed, _ = _fit(splits, tmp_path, "resumed", epochs=6, ckpt_path=ckpt)
    assert resumed.game.steps == with_val.game.steps
    assert torch.equal(resumed.game.weights()[1], with_val.game.weights()[1])
    for a, b in zip(resumed.parameters(), with_val.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_validation_step_that_plays_the_game_is_refused(tmp_path):
    class Leaky(Classifier):
        def validation_step(self, batch, batch_idx):
            return self.game.lagrangian(self.rates_batch(batch))

    splits = make_synthetic(n=600, d=4, group_shift=1.5, seed=3)
    model = Leaky(_problem(splits), splits.train.num_features)
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    with pytest.raises(RuntimeError, match="validation_step called the game's lagrangian"):
        trainer.fit(model, _loader(splits.train, 300), _loader(splits.validation, 300))


def test_validate_without_fit_evaluates_the_untrained_model():
    splits = make_synthetic(n=600, d=4, group_shift=1.5, seed=3)
    model = Classifier(_problem(splits), splits.train.num_features)
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False,
                         enable_model_summary=False)
    (metrics,) = trainer.validate(model, _loader(splits.validation, 64))
    expected = _val_reference(model, splits.validation)
    assert metrics["val/objective"] == pytest.approx(expected["objective"], abs=1e-6)
    assert model.game.steps == 0
