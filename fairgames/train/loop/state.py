"""The training loop's whole state, as a checkpoint holds it: the model, the game's
``state_dict`` (every player, the running estimates), the samplers' positions, the snapshots,
the history, the early stop and the RNG state (:func:`engine_state`), and its restoration,
refusing a checkpoint this run cannot continue with the remedy named
(:func:`load_engine_state`). :class:`~fairgames.train.loop.engine.Engine`'s ``state_dict`` and
``load_state_dict`` are these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .engine import Engine

ENGINE_FORMAT = 2
"""Version of :meth:`~fairgames.train.loop.engine.Engine.state_dict`'s layout; 2 holds the
game's per-player state (:data:`fairgames.game.optimizer.CHECKPOINT_FORMAT` 2)."""


def engine_state(engine: Engine) -> dict[str, Any]:
    """The loop's whole state (model, game, sampler, snapshots, history, RNG)."""
    return {
        "format": ENGINE_FORMAT,
        "step": engine.step,
        "world_size": engine.parallel_ranks,
        "model": engine.model.state_dict(),
        "game": engine.copt.state_dict(),
        "sampler": engine.sampler.state_dict() if engine.sampler is not None else None,
        "heldout_sampler": (engine.heldout_sampler.state_dict()
                            if engine.heldout_sampler is not None else None),
        "snapshots": engine.snapshots.state_dict(),
        "extra_snapshots": (engine.extra_snapshots.state_dict()
                            if engine.extra_snapshots is not None else None),
        "history": engine.history,
        "early_stop": (engine.early_stop.state_dict() if engine.early_stop is not None
                       else None),
        "rng": {"torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available()
                else []},
    }


def load_engine_state(engine: Engine, state: Mapping[str, Any]) -> None:
    """Restore :func:`engine_state` into ``engine`` but its step and RNG state (the game checks
    that the problem matches; a checkpoint of N ranks resumes on N ranks only)."""
    _check_layout(state, engine.parallel_ranks)
    engine.model.load_state_dict(state["model"])
    engine.copt.load_state_dict(state["game"])  # each player moves its tensors itself
    if engine.sampler is not None:
        if state["sampler"] is None:
            raise ValueError("the checkpoint was trained full-batch, this run uses "
                             "minibatches")
        engine.sampler.load_state_dict(state["sampler"])
    elif state["sampler"] is not None:
        raise ValueError("the checkpoint was trained on minibatches, this run full-batch")
    held = state.get("heldout_sampler")
    if (held is None) != (engine.heldout_sampler is None):
        raise ValueError("the checkpoint and this run differ in their held-out minibatches "
                         "(trainer.constraint_split)")
    if engine.heldout_sampler is not None:
        engine.heldout_sampler.load_state_dict(held)
    engine.snapshots.load_state_dict(state["snapshots"])
    if engine.extra_snapshots is not None:
        if state.get("extra_snapshots") is None:
            raise ValueError("the checkpoint holds no snapshots of the extra state this "
                             "run records (robust.select=played): resume with the "
                             "setting it was trained with, or start afresh")
        engine.extra_snapshots.load_state_dict(state["extra_snapshots"])
    engine.history = list(state["history"])
    if engine.early_stop is not None and state.get("early_stop") is not None:
        engine.early_stop.load_state_dict(state["early_stop"])


def restore_rng(state: Mapping[str, Any]) -> None:
    """Set torch's (and CUDA's) RNG state to the checkpoint's."""
    torch.set_rng_state(state["rng"]["torch"])
    if state["rng"]["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])


def _check_layout(state: Mapping[str, Any], ranks: int) -> None:
    """Refuse a checkpoint of another format, or written by another number of processes."""
    if state.get("format") != ENGINE_FORMAT:
        raise ValueError(f"the checkpoint has format {state.get('format')!r}; this version "
                         f"of fairgames reads format {ENGINE_FORMAT} only (format 1 "
                         "predates the plug-in players): start the run afresh, or resume "
                         "it with the fairgames version that wrote it")
    # (a checkpoint without the key predates data-parallel checkpoints: one process)
    saved = int(state.get("world_size", 1))
    if saved != ranks:
        raise ValueError(
            f"the checkpoint was written by a run on {saved} process(es), this run has "
            f"{ranks}: each rank's shard of the global batch, and so the game's rounding, "
            f"depends on the count: resume it on {saved} (torchrun --nproc_per_node "
            f"{saved} scripts/train.py trainer.distributed=true trainer.resume=<run dir>; "
            "python scripts/train.py trainer.resume=<run dir> for 1), or start afresh")
