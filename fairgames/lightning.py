"""PyTorch Lightning: play the game inside a ``Trainer`` (the extra ``fairgames[lightning]``).

:class:`ConstrainedModule` is a ``LightningModule`` whose optimizer is a
:class:`~fairgames.game.ConstrainedOptimizer` around yours. Lightning's automatic optimization
calls ``optimizer.step(closure)``; the game runs the closure (your ``training_step``'s loss,
the Lagrangian of the batch, and its backward), steps θ through your optimizer and then plays
the multipliers and the other players — exactly as in a hand-written loop. Subclass it, give
``forward`` and :meth:`ConstrainedModule.rates_batch` (the batch's scores, labels and groups
as a :class:`fairgames.rates.Batch`; ``self.game.batch(scores, labels, groups=...)`` fills in
the value names declared on the problem), and train with any ``Trainer``. Every step logs
the step's true objective, its largest constraint value and the multipliers (``game/...``) as
device tensors, which Lightning reads at its flush steps (``log_every_n_steps``).
``trainer.validate`` / ``test`` (and the validation of ``fit``) log the problem's true
objective and constraints on the whole split (``val/...``, ``test/...``) without touching the
game; ``trainer.predict`` returns the model's scores.

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

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import torch

try:
    import lightning.pytorch as pl
except ImportError as e:             # pragma: no cover (the extra is installed with test)
    raise ImportError("fairgames.lightning needs PyTorch Lightning: pip install "
                      "'fairgames[lightning]'") from e

from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.rates import Batch, RateEvaluator

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
        return self.game.lagrangian(self.rates_batch(batch))

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Log the step's record (subclasses overriding this hook call ``super()``)."""
        self._log_game()

    def _log_game(self) -> None:
        """This step's record, logged every step as device tensors: Lightning reads them only
        on its flush steps (``log_every_n_steps``), so no other step syncs."""
        record = self.game.last if self.game is not None else None
        if record is None:
            return
        self.log("game/objective", record.objective_true, on_step=True, on_epoch=False)
        if record.constraints_true.numel():
            self.log("game/max_constraint", record.constraints_true.max(), on_step=True,
                     on_epoch=False)
        omega, lam = self.game.weights()
        self.log("game/lambda/objective_weight", omega, on_step=True, on_epoch=False)
        for i, name in enumerate(self.game.terms.row_names):
            self.log(f"game/lambda/{name}", lam[i], on_step=True, on_epoch=False)

    # ------------------------------------------------------------ validation, test, predict
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        """Keep the batch's scores, labels and groups: the epoch's end evaluates the problem's
        true rates on the whole split (``val/...``); the game is not touched."""
        self._keep(batch)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        """As :meth:`validation_step`, logged as ``test/...``."""
        self._keep(batch)

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0
                     ) -> torch.Tensor:
        """The model's scores ``self(x)``; ``x`` is the batch or, for a tuple or list batch
        (a ``TensorDataset``'s), its first item (positive scores predict the positive
        class)."""
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        return self(x)

    def on_validation_epoch_start(self) -> None:
        self._kept = []

    def on_test_epoch_start(self) -> None:
        self._kept = []

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        self._check_untouched("validation_step")

    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int,
                          dataloader_idx: int = 0) -> None:
        self._check_untouched("test_step")

    def on_validation_epoch_end(self) -> None:
        self._log_split("val")

    def on_test_epoch_end(self) -> None:
        self._log_split("test")

    def _keep(self, batch: Any) -> None:
        if self.game is None:          # validate / test without fit: the game's batch()
            self.configure_optimizers()
        kept = self.rates_batch(batch)
        if kept.scores is not None:       # under validate's no_grad/inference_mode already
            kept = dataclasses.replace(kept, scores=kept.scores.detach())
        self.__dict__.setdefault("_kept", []).append(kept)

    def _check_untouched(self, hook: str) -> None:
        # lagrangian() left values for the next step(): λ would play on this split's rates
        # and state_dict() (a checkpoint) would refuse to save.
        if self.game is not None and not self.game._records.empty:
            self.game._records.clear()
            raise RuntimeError(
                f"{hook} called the game's lagrangian (or record_heldout): its rates would "
                "move the multipliers at the next training step and block checkpoints; "
                "evaluate without the game — ConstrainedModule's own validation_step / "
                "test_step log the problem's true rates on the split (val/..., test/...)")

    def _log_split(self, prefix: str) -> None:
        """The problem's true objective and constraints on the whole split (exact float64
        counts over the kept batches; NaN for a subset the split lacks)."""
        kept, self._kept = getattr(self, "_kept", []), []
        if not kept:
            return
        values = self._split_evaluator().evaluate_split(kept, empty="nan", bounds=False)
        objective, constraints = self.problem.true_values(values.true)
        self.log(f"{prefix}/objective", objective.float())
        if constraints.numel():
            self.log(f"{prefix}/max_constraint", constraints.max().float())
        for name, value in zip(self.problem.constraint_names, constraints, strict=True):
            self.log(f"{prefix}/constraint/{name}", value.float())

    def _split_evaluator(self) -> RateEvaluator:
        # kept in a plain dict, not as a submodule: the model's state_dict (and so its
        # checkpoints) stays the same
        cache = self.__dict__.setdefault("_evaluators", {})
        if "split" not in cache:
            cache["split"] = self.problem.make_evaluator().eval().to(self.device)
        return cache["split"]
