"""PyTorch Lightning: play the game inside a ``Trainer`` (the extra ``fairgames[lightning]``).

:class:`ConstrainedModule` is a ``LightningModule`` whose optimizer is a
:class:`~fairgames.game.ConstrainedOptimizer` around yours. Lightning's automatic optimization
calls ``optimizer.step(closure)``; the game runs the closure (your ``training_step``'s loss,
the Lagrangian of the batch, and its backward), steps θ through your optimizer and then plays
the multipliers and the other players — exactly as in a hand-written loop. Subclass it, give
``forward`` and :meth:`ConstrainedModule.rates_batch` (the batch's scores, labels and groups
as a :class:`fairgames.rates.Batch`; ``self.game.batch(scores, labels, groups=...)`` fills in
the value names declared on the problem), and train with any ``Trainer``. At each logging step
the objective, the largest constraint value and the multipliers are logged (``game/...``).

Example:
    >>> import torch
    >>> from fairgames.game import Problem
    >>> from fairgames.rates import error_rate, group, true_positive_rate as tpr
    >>> class Model(ConstrainedModule):
    ...     def __init__(self):
    ...         problem = Problem(error_rate(), [tpr(group("group", "b")) >= tpr() - 0.05],
    ...                           group_values={"group": ["a", "b"]})
    ...         super().__init__(problem, lambda p: torch.optim.Adam(p, lr=0.05))
    ...         self.net = torch.nn.Linear(2, 1)
    ...     def forward(self, x):
    ...         return self.net(x).squeeze(-1)
    ...     def rates_batch(self, batch):
    ...         x, y, g = batch
    ...         return self.game.batch(self(x), y, groups={"group": g})
    >>> type(Model().configure_optimizers()).__name__
    'ConstrainedOptimizer'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

try:
    import lightning.pytorch as pl
except ImportError as e:             # pragma: no cover (the extra is installed with test)
    raise ImportError("fairgames.lightning needs PyTorch Lightning: pip install "
                      "'fairgames[lightning]'") from e

from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.rates import Batch

OptimizerFactory = Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]


class ConstrainedModule(pl.LightningModule):
    """A ``LightningModule`` trained as a constrained game.

    Args:
        problem: the :class:`~fairgames.game.Problem` (objective and constraints).
        optimizer: builds θ's torch optimizer from the module's parameters.
        **game_options: more :class:`~fairgames.game.ConstrainedOptimizer` keywords
            (``preset``, ``multiplier_lr``, ...).
    """

    def __init__(self, problem: Problem, optimizer: OptimizerFactory, **game_options: Any
                 ) -> None:
        super().__init__()
        self.problem, self.optimizer_factory = problem, optimizer
        self.game_options = game_options
        self.game: ConstrainedOptimizer | None = None

    def rates_batch(self, batch: Any) -> Batch:
        """The batch as a :class:`fairgames.rates.Batch` (scores from ``self(...)``)."""
        raise NotImplementedError("ConstrainedModule subclasses give rates_batch(batch): the "
                                  "batch's scores (self(x)), labels and groups as a Batch")

    def configure_optimizers(self) -> ConstrainedOptimizer:
        self.game = ConstrainedOptimizer(self.problem, self.optimizer_factory(self.parameters()),
                                         **self.game_options)
        return self.game

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.game is None:
            raise RuntimeError("the game is made in configure_optimizers: train with a Trainer")
        loss = self.game.lagrangian(self.rates_batch(batch))
        if self._logging_now():
            self._log_game()
        return loss

    def _logging_now(self) -> bool:
        trainer = self._trainer
        return trainer is not None and trainer.global_step % max(1, trainer.log_every_n_steps) == 0

    def _log_game(self) -> None:
        """The previous step's record (a read syncs on a GPU: logging steps only)."""
        record = self.game.last if self.game is not None else None
        if record is None:
            return
        self.log("game/objective", record.objective_true, on_step=True, on_epoch=False)
        if record.constraints_true.numel():
            self.log("game/max_constraint", record.constraints_true.max(), on_step=True,
                     on_epoch=False)
        for name, value in self.game.multipliers_by_name().items():
            self.log(f"game/lambda/{name}", float(value), on_step=True, on_epoch=False)
