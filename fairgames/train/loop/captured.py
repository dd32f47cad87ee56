"""The training loop's step recorded once and replayed (``trainer.compile=true``).

:class:`CapturedSteps` plays an :class:`~fairgames.train.loop.engine.Engine`'s steps through
:meth:`ConstrainedOptimizer.capture <fairgames.game.ConstrainedOptimizer.capture>`: the
whole step — the batch's rows gathered from the split, the model's forward and backward,
gradient clipping, the held-out scores, the fused rate pass, θ's optimizer and every player —
is one graph, compiled by inductor on CPU where a C++ compiler exists (else replayed op by op,
with a :class:`~fairgames.game.capture.CaptureWarning`) and as a CUDA graph on CUDA.

What stays on the host, every step as in the eager loop: the sampler draws the next
minibatch's row ids, which are copied into the graph's static index tensor (so the sampler's
state, checkpoints and resumes are those of the eager loop); snapshots, logging and
checkpoints read the live parameters and game state, which every replay updates in place.
The first step of a fresh game is played eagerly (it makes the lazy state: θ's optimizer
buffers, the rate plan); the next one is recorded. Each minibatch size gets its own graph
(an epoch's last, short batch: a second one).

Example:
    >>> import torch, warnings
    >>> from fairgames.data import make_synthetic
    >>> from fairgames.game import ConstrainedOptimizer, Problem
    >>> from fairgames.rates import error_rate, positive_prediction_rate
    >>> from fairgames.train.loop.engine import BatchSettings, Engine, GameData
    >>> train = make_synthetic(n=300, d=3, seed=0).train
    >>> model = torch.nn.Linear(3, 1)
    >>> problem = Problem(error_rate(), [(positive_prediction_rate() >= 0.2).named("ppr")])
    >>> copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1))
    >>> engine = Engine(model, copt, GameData(train, "group"), steps=6,
    ...                 batches=BatchSettings(size=64))
    >>> engine.capture_steps(compile=False)         # replayed op by op
    >>> engine.run()
    >>> engine.step, copt.steps, len(train)
    (6, 6, 180)
    >>> sorted(engine.captured.graphs)      # batches of 64 rows, and each epoch's last 52
    [(52, None), (64, None)]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from fairgames.game.capture import check_capturable

if TYPE_CHECKING:
    from .engine import Engine

Batch = tuple[torch.Tensor, dict[str, Any]]


class CapturedSteps:
    """An engine's steps as recorded graphs, one per minibatch shape (see the module).

    Args:
        engine: the loop whose steps it plays (``engine.train_step`` calls :meth:`step`).
        compile: ``None``: inductor where it can run (CUDA, or a C++ compiler on CPU),
            else replayed op by op with a warning; ``False``: replayed op by op.

    Raises:
        ValueError: a game or loop a recorded step cannot replay, naming the remedy.
    """

    def __init__(self, engine: Engine, *, compile: bool | None = None) -> None:
        if engine.parallel is not None:
            raise ValueError("trainer.compile with trainer.distributed: the game's collective "
                             "is not recorded; set trainer.compile=false")
        check_capturable(engine.copt)      # now, not at the recording step
        self.engine, self.compile = engine, compile
        # (batch rows, held-out rows) -> (index buffer, held-out index buffer, captured step)
        self.graphs: dict[tuple[int | None, int | None], tuple[Any, Any, Any]] = {}

    def step(self) -> Batch | Any:
        """Play one step; returns the engine's last batch (or a function making it at log
        time, so that the replayed steps gather no rows outside the graph)."""
        e = self.engine
        index = e.next_index()
        held = (e._shard(next(e.heldout_sampler), 0)
                if e.heldout_sampler is not None else None)
        if e.copt.steps == 0:
            # the lazy state (θ's optimizer buffers, the rate plan) is made by a first step;
            # recorded then, it would be a fresh value on every replay
            x, fields = e.batch(index)
            e.play(x, fields, held)
            return x, fields
        key = (None if index is None else len(index), None if held is None else len(held))
        if key not in self.graphs:
            # static copies the graph reads; the recording plays this step
            buffers = (None if index is None else index.clone(),
                       None if held is None else held.clone())
            rows, held_rows = buffers
            captured = e.copt.capture(lambda: e.play(*e.batch(rows), held_rows),
                                      compile=self.compile)
            self.graphs[key] = (*buffers, captured)
            self.compile = captured.compiled     # decided (and warned about) once
        else:
            rows, held_rows, captured = self.graphs[key]
            if rows is not None:
                rows.copy_(index)
            if held_rows is not None:
                held_rows.copy_(held)
            captured()
        if rows is None:
            return e.batch(None)
        return lambda: e.batch(rows)
