"""``fairgames.lightning.ConstrainedModule``: the game inside a CPU Lightning ``Trainer``
meets a TPR-parity constraint that unconstrained training misses (synthetic data)."""

from __future__ import annotations

import numpy as np
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
