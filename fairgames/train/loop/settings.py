"""The engine's settings: the rows the game plays on (:class:`GameData`, checked against the
game by :func:`check_data`), its batches, logging, snapshots and checkpoints — each a frozen
dataclass that :class:`~fairgames.train.loop.engine.Engine` takes by keyword.

Example:
    >>> BatchSettings(size=64).size, LogSettings().every, CheckpointSettings().run_dir
    (64, 50, None)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fairgames.data import TabularDataset
from fairgames.game import ConstrainedOptimizer

from .logger import RunLogger


@dataclass(frozen=True)
class GameData:
    """The rows the game plays on.

    Attributes:
        train: the θ-player's training split, already on the model's device.
        protected: the attribute whose per-group rates are logged (and batches balanced by).
        baseline_scores: ``[N]`` scores of a baseline model on ``train`` (churn problems).
        heldout: a split the multipliers and slacks play on instead of the θ-player's batches
            (Cotter et al. 2019's two-dataset game,
            :meth:`~fairgames.game.ConstrainedOptimizer.record_heldout`): each step scores it
            without gradients in eval mode — all of it when training is full-batch, else a
            minibatch of the batch size from its own seeded sampler. ``None``: off. The
            logged constraint values are then the held-out ones, and the last training
            batch's true values are logged beside them (``constraints_batch``; TensorBoard
            ``constraint/<name>/batch_value``).
        heldout_baseline_scores: ``[N]`` baseline scores on ``heldout`` (churn problems).

    Example:
        >>> from fairgames.data import make_synthetic
        >>> splits = make_synthetic(n=300, d=3, seed=0)
        >>> data = GameData(splits.train, "group", heldout=splits.validation)
        >>> data.protected, data.heldout is splits.validation
        ('group', True)
    """

    train: TabularDataset
    protected: str
    baseline_scores: torch.Tensor | None = None
    heldout: TabularDataset | None = None
    heldout_baseline_scores: torch.Tensor | None = None


@dataclass(frozen=True)
class BatchSettings:
    """Rows per step: ``size`` (``None``: the full batch), ``balanced`` (draw every group
    equally, re-weighted to the population) and the ``seed`` of the minibatch order;
    ``sources``: every source's rows per step (several data sets, ``data=sources``).

    Example:
        >>> BatchSettings(size=64).balanced, BatchSettings().size
        (False, None)
    """

    size: int | None = None
    balanced: bool = False
    seed: int = 0
    # several data sets (paper 001): every source's rows per step (None: all of them);
    # per-source batches (fairgames.data.SourcesSampler) when any is a number
    sources: Mapping[str, int | None] | None = None

    @property
    def per_source(self) -> bool:
        """Whether a source is minibatched (the batches are then every source's own)."""
        return any(v is not None for v in (self.sources or {}).values())


@dataclass(frozen=True)
class LogSettings:
    """Logging: every ``every`` steps (the only place the loop reads device values), to a
    :class:`RunLogger` (``None``: no TensorBoard), with a tqdm bar if ``progress``.

    Example:
        >>> LogSettings(every=10).every, LogSettings().logger
        (10, None)
    """

    every: int = 50
    logger: RunLogger | None = None
    progress: bool = False
    # scalars of the model on whole splits, computed at log time only (e.g. paper 004's
    # true / noisy / robust constraint values: fairgames.noisy_groups.robust.robust_log)
    extra: Callable[[torch.nn.Module], Mapping[str, float | None]] | None = None


@dataclass(frozen=True)
class SnapshotSettings:
    """The iterates kept for the stochastic model and the best iterate: one every ``every``
    steps, at most ``max_kept`` of them, thinned by ``strategy``
    (:class:`~fairgames.game.solutions.SnapshotRecorder`: ``"reservoir"``, a seeded uniform
    sample of all snapshots, or ``"uniform_stride"``, evenly spaced), each at a ``"random"``
    step of its window of ``every`` steps (so a cycling game is seen in every phase) or the
    ``"fixed"`` last one. ``extra``: another module whose state is snapshotted at the same
    steps by a recorder of its own (the DRO adversary's p̃ for ``robust.select=played``).

    Example:
        >>> SnapshotSettings(every=5, max_kept=4).strategy, SnapshotSettings().offset
        ('reservoir', 'random')
    """

    every: int = 10
    max_kept: int = 100
    strategy: str = "reservoir"
    offset: str = "random"
    extra: torch.nn.Module | None = None


@dataclass(frozen=True)
class CheckpointSettings:
    """Checkpoints: every ``every`` steps (0: only when
    :meth:`~fairgames.train.loop.engine.Engine.save_checkpoint` is called) into ``run_dir``
    (``None``: never written); ``on_save(state)`` adds run-level items to each one.

    Example:
        >>> CheckpointSettings().every, CheckpointSettings().run_dir
        (0, None)
    """

    every: int = 0
    run_dir: Path | None = None
    on_save: Callable[[dict[str, Any]], None] | None = None


def check_data(data: GameData, copt: ConstrainedOptimizer) -> None:
    """Refuse game data the engine cannot play, naming what to change."""
    protected, heldout = data.protected, data.heldout
    if protected not in data.train.groups:
        raise ValueError(f"protected attribute {protected!r} is not in the data "
                         f"({sorted(data.train.groups)})")
    if heldout is not None and protected not in heldout.groups:
        raise ValueError(f"protected attribute {protected!r} is not in the held-out data "
                         f"({sorted(heldout.groups)})")
    inside = [p.name for p in copt.players if p.plays_inside_step]
    if heldout is not None and inside:
        raise ValueError("a held-out split for the multipliers needs players that step on "
                         f"records made before step(); in {copt.preset.name!r}, {inside} "
                         "evaluate(s) the model inside step() (θ by best response): use a "
                         "gradient θ-player")
    if (heldout is not None and data.baseline_scores is not None
            and data.heldout_baseline_scores is None):
        raise ValueError("the problem reads baseline scores: pass heldout_baseline_scores "
                         "for the held-out split too")
