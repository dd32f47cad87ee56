"""The training loop: game steps on device-resident data, logging at intervals, snapshots and
checkpoints.

One step (no host-device sync; :func:`fairgames.rates.no_host_sync` proves it on CPU):
draw a minibatch index on the device (or use the whole split), score it, build a
:class:`~fairgames.rates.Batch`, and let the :class:`~fairgames.game.ConstrainedOptimizer` play
(``lagrangian`` → ``backward`` → optional gradient clipping → ``step``; a best-response
θ-player runs its inner loop through ``step_batch``). Once in every ``snapshot_every``
steps (at a seeded random step of the window, or its last) the model is copied on the device.
Only at ``log_every`` steps does the loop read device values: the game's last
:class:`~fairgames.game.StepRecord`, the surrogate bounds of the objective and constraints on
the batch, per-group rates, the infeasibility verdict — and it writes them to TensorBoard,
to the progress bar and to the history that ``dynamics.png`` plots.

A checkpoint (every ``checkpoint_every`` steps, at ``stop_after``, and on SIGINT or SIGTERM at
the step boundary; atomic, the previous one kept) holds the model, the optimizer's
``state_dict`` (every player, the running estimates), the sampler's position, the snapshots,
the history and the RNG state: a resumed run continues exactly where the stopped one was.

Example:
    >>> import torch
    >>> from fairgames.data import make_synthetic
    >>> from fairgames.game import ConstrainedOptimizer, Problem
    >>> from fairgames.rates import error_rate, true_positive_rate, group
    >>> train = make_synthetic(n=400, d=3, seed=0).train
    >>> tpr = lambda g: true_positive_rate(group("group", g))
    >>> problem = Problem(error_rate(), [(tpr("1") >= tpr("0") - 0.1).named("eo")])
    >>> model = torch.nn.Linear(3, 1)
    >>> copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1))
    >>> engine = Engine(model, copt, GameData(train, "group"), steps=20,
    ...                 logging=LogSettings(every=10))
    >>> engine.run()
    >>> engine.step, [h["step"] for h in engine.history]
    (20, [10, 20])
"""

from __future__ import annotations

import logging
import math
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from fairgames.data import MinibatchSampler, TabularDataset
from fairgames.game import ConstrainedOptimizer, NonFiniteStepError, threshold_points
from fairgames.game.solutions import SnapshotRecorder
from fairgames.models import decision_threshold
from fairgames.rates import Batch, EmptySubsetError

from ..data import predict_scores
from ..evaluation import batch_group_table, parity_gaps
from .captured import CapturedSteps
from .checkpoint import write_checkpoint
from .logger import RunLogger
from .parallel import DataParallel, agree_to_stop, shard

# Each log interval's line (train.log under scripts/train.py); read at log time, no extra sync.
LOG = logging.getLogger(__name__)

ENGINE_FORMAT = 2
"""Version of :meth:`Engine.state_dict`'s layout; 2 holds the game's per-player state
(:data:`fairgames.game.optimizer.CHECKPOINT_FORMAT` 2)."""


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
    equally, re-weighted to the population) and the ``seed`` of the minibatch order.

    Example:
        >>> BatchSettings(size=64).balanced, BatchSettings().size
        (False, None)
    """

    size: int | None = None
    balanced: bool = False
    seed: int = 0


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
    """Checkpoints: every ``every`` steps (0: only when :meth:`Engine.save_checkpoint` is
    called) into ``run_dir`` (``None``: never written); ``on_save(state)`` adds run-level
    items to each one.

    Example:
        >>> CheckpointSettings().every, CheckpointSettings().run_dir
        (0, None)
    """

    every: int = 0
    run_dir: Path | None = None
    on_save: Callable[[dict[str, Any]], None] | None = None


class Engine:
    """Trains ``model`` with ``copt`` on ``data``.

    Args:
        model: any ``nn.Module`` mapping features ``[B, D]`` to scores ``[B]`` (or ``[B, 1]``).
        copt: the :class:`~fairgames.game.ConstrainedOptimizer` over the model's optimizer.
        data: the training split, the protected attribute and optionally baseline scores and
            a held-out split for the multipliers (:class:`GameData`).
        steps: number of game steps.
        grad_clip: clip the model's gradient norm (``None``: off).
        batches, logging, snapshots, checkpoints: :class:`BatchSettings`,
            :class:`LogSettings`, :class:`SnapshotSettings`, :class:`CheckpointSettings`.
        parallel: a data-parallel run's rank, world size and θ's DDP module
            (:class:`~fairgames.train.loop.parallel.DataParallel`; ``copt`` then has the process
            group): each step plays this rank's shard of the global batch.
        early_stop: checked after each log interval, ``early_stop.observe(engine)`` says
            whether to end the game there (:class:`~fairgames.train.results.early_stop.EarlyStop`;
            ``None``: play every step); its ``state_dict`` goes in the checkpoint.

    Example:
        >>> import torch
        >>> from fairgames.data import make_synthetic
        >>> from fairgames.game import ConstrainedOptimizer, Problem
        >>> from fairgames.rates import error_rate, positive_prediction_rate
        >>> train = make_synthetic(n=300, d=3, seed=0).train
        >>> model = torch.nn.Linear(3, 1)
        >>> problem = Problem(error_rate(), [(positive_prediction_rate() >= 0.2).named("ppr")])
        >>> copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1))
        >>> engine = Engine(model, copt, GameData(train, "group"), steps=6,
        ...                 batches=BatchSettings(size=64), logging=LogSettings(every=3))
        >>> engine.run()
        >>> engine.step, [h["step"] for h in engine.history]
        (6, [3, 6])
    """

    def __init__(self, model: torch.nn.Module, copt: ConstrainedOptimizer, data: GameData, *,
                 steps: int, grad_clip: float | None = None,
                 batches: BatchSettings = BatchSettings(),
                 logging: LogSettings = LogSettings(),
                 snapshots: SnapshotSettings = SnapshotSettings(),
                 checkpoints: CheckpointSettings = CheckpointSettings(),
                 parallel: DataParallel | None = None, early_stop: Any = None) -> None:
        _check_data(data, copt)
        train, heldout, protected = data.train, data.heldout, data.protected
        self.model, self.copt, self.train = model, copt, train
        self.protected = protected
        # the threshold rates P[f ≥ z] the problem reads (paper 003's SP grid), for the
        # compact parity scalars logged beside λ
        self.thresholds = threshold_points(copt.problem.leaves)
        self.steps = int(steps)
        batch_size, balanced_by = batches.size, protected if batches.balanced else None
        self.full_batch = batch_size is None or batch_size >= len(train)
        self.sampler = None if self.full_batch else MinibatchSampler(
            train, batch_size, seed=batches.seed, balanced_by=balanced_by)
        self.heldout, self.heldout_baseline_scores = heldout, data.heldout_baseline_scores
        # Its own seed, so that the training minibatches do not depend on whether it is on.
        self.heldout_sampler = None if (heldout is None or self.full_batch
                                        or batch_size >= len(heldout)) else MinibatchSampler(
            heldout, batch_size, seed=batches.seed + 1, balanced_by=balanced_by)
        self.baseline_scores = data.baseline_scores
        self.log_every, self.checkpoint_every = int(logging.every), int(checkpoints.every)
        self.grad_clip = grad_clip
        self.run_dir, self.logger = checkpoints.run_dir, logging.logger
        self.progress, self.on_checkpoint = logging.progress, checkpoints.on_save
        self.extra_scalars = logging.extra
        self.snapshots = SnapshotRecorder(model, snapshots.every, snapshots.max_kept,
                                          snapshots.strategy, seed=batches.seed,
                                          offset=snapshots.offset)
        # the same seed and calls: its snapshots are of the same steps as the model's
        self.extra_snapshots = None if snapshots.extra is None else SnapshotRecorder(
            snapshots.extra, snapshots.every, snapshots.max_kept, snapshots.strategy,
            seed=batches.seed, offset=snapshots.offset)
        self.history: list[dict[str, Any]] = []
        self.step = 0
        # the checkpoint holding the current state, so that one step is never written twice
        # (a second copy would push the older checkpoint out of checkpoint.prev.pt)
        self.last_checkpoint: Path | None = None
        self._saved_step: int | None = None
        self.params = [p for p in model.parameters() if p.requires_grad]
        # data-parallel (trainer.distributed): θ scores through DDP, on this rank's shard of
        # every global batch (fairgames.train.loop.parallel)
        self.parallel = parallel
        self.forward = parallel.module if parallel is not None and parallel.module else model
        self._full_index = self._shard(None, len(train))
        self._full_fields = self._fields(self._full_index) if self.full_batch else None
        self._heldout_index = self._shard(None, len(heldout)) if heldout is not None else None
        self._heldout_full = (self._heldout_fields(self._heldout_index)
                              if heldout is not None and self.heldout_sampler is None else None)
        if heldout is not None:
            self._check_heldout()
        # the last batch, for logging (a function of it under trainer.compile: made at log time)
        self._last: Any = None
        self.captured: CapturedSteps | None = None
        self.early_stop = early_stop

    # ------------------------------------------------------------------ one step
    def _shard(self, index: torch.Tensor | None, rows: int) -> torch.Tensor | None:
        """This rank's rows of a global batch (``None``: all ``rows``); one process: as is."""
        if self.parallel is None:
            return index
        if index is None:
            index = torch.arange(rows, device=self.train.labels.device)
        return shard(index, self.parallel)

    def _rows(self, ds: TabularDataset, index: torch.Tensor | None) -> torch.Tensor:
        return ds.features if index is None else ds.features[index]

    def _fields(self, index: torch.Tensor | None) -> dict[str, Any]:
        return _batch_fields(self.train, index, self.baseline_scores, self.sampler)

    def _heldout_fields(self, index: torch.Tensor | None) -> dict[str, Any]:
        assert self.heldout is not None
        return _batch_fields(self.heldout, index, self.heldout_baseline_scores,
                             self.heldout_sampler)

    def _check_heldout(self) -> None:
        """Refuse, before any step, a held-out split on which a rate of the problem has no
        example (e.g. no positive of a group): the game would play on running estimates."""
        assert self.heldout is not None
        ds = self.heldout
        zeros = torch.zeros(len(ds), device=ds.features.device)
        try:
            self.copt.problem.make_evaluator().to(ds.features.device).evaluate_split(
                [Batch(scores=zeros, **self._heldout_fields(None))])
        except EmptySubsetError as e:
            raise ValueError(f"the held-out split ({len(ds)} rows) cannot measure the "
                             f"constraints: {e}") from e

    def _record_heldout(self, index: torch.Tensor | None = None) -> None:
        """Score the held-out split (or a minibatch of it: ``index``, else the next one) at
        the current θ, without gradients and in eval mode, for the multipliers' step."""
        assert self.heldout is not None
        if self.heldout_sampler is None:
            x, fields = self._rows(self.heldout, self._heldout_index), self._heldout_full
            assert fields is not None
        else:
            if index is None:
                index = self._shard(next(self.heldout_sampler), 0)
            x, fields = self.heldout.features[index], self._heldout_fields(index)
        scores = predict_scores(self.model, x, chunk=max(1, len(x)))   # one chunk
        self.copt.record_heldout(Batch(scores=scores, **fields))

    def train_step(self) -> None:
        """One game step (no host-device sync)."""
        if self.captured is not None:       # trainer.compile: fairgames.train.loop.captured
            self._last = self.captured.step()
        else:
            x, fields = self.batch(self.next_index())
            self.play(x, fields)
            self._last = (x, fields)
        self.step += 1
        self.snapshots.step()
        if self.extra_snapshots is not None:
            self.extra_snapshots.step()

    def next_index(self) -> torch.Tensor | None:
        """This rank's rows of the next minibatch (``None``: the full batch)."""
        if self.full_batch:
            return None
        assert self.sampler is not None
        return self._shard(next(self.sampler), 0)

    def batch(self, index: torch.Tensor | None) -> tuple[torch.Tensor, dict[str, Any]]:
        """Features and :class:`Batch` fields of the training rows ``index`` (``None``: the
        full batch)."""
        if index is None:
            assert self._full_fields is not None
            return self._rows(self.train, self._full_index), self._full_fields
        return self.train.features[index], self._fields(index)

    def play(self, x: torch.Tensor, fields: dict[str, Any],
             heldout_index: torch.Tensor | None = None) -> None:
        """One game step on the batch ``x, fields`` (the held-out minibatch ``heldout_index``,
        else the held-out sampler's next one)."""
        self.model.train()

        def closure() -> torch.Tensor:
            # torch's closure: a gradient θ-player calls it once, a best-response θ-player
            # once per inner step and once more to record the rates at its new θ
            self.copt.zero_grad()
            scores = self.forward(x)
            if scores.dim() == 2 and scores.shape[1] == 1:
                scores = scores[:, 0]
            loss = self.copt.lagrangian(Batch(scores=scores, **fields))
            if self.heldout is not None:       # θ_t's held-out rates, before θ moves
                self._record_heldout(heldout_index)
            loss.backward()
            if self.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip)
            return loss

        self.copt.step(closure)

    def capture_steps(self, compile: bool | None = None) -> None:
        """Play the remaining steps as one recorded graph, compiled where possible
        (``trainer.compile``; :class:`~fairgames.train.loop.captured.CapturedSteps`). Call it after
        any :meth:`load_state_dict`: the graph reads the tensors there at recording time.

        Raises:
            ValueError: what a recorded step cannot replay, naming the remedy.
        """
        self.captured = CapturedSteps(self, compile=compile)

    # ------------------------------------------------------------------ the loop
    def run(self, stop_after: int | None = None) -> None:
        """Play until ``steps``, or stop after ``stop_after`` steps and write a checkpoint at
        that step (with a run directory): a resumed run continues from there.

        SIGINT and SIGTERM (in the main thread) stop the loop at the next step boundary: the
        engine writes a checkpoint at that step and raises :class:`RunInterrupted`. A second
        signal stops at once (``KeyboardInterrupt``; the checkpoints on disk stay intact).
        Data-parallel, the ranks stop together at the next log or checkpoint step after a
        signal to any of them (:meth:`_stop_signal`); rank 0 writes the checkpoint.
        """
        end = self.steps if stop_after is None else min(self.steps, stop_after)
        if self.stopped_early:       # resumed after the stop: nothing more to play
            end = self.step
        bar = tqdm(total=self.steps, initial=self.step, disable=not self.progress,
                   desc="train", dynamic_ncols=True, leave=True)
        signals = StopSignals().start()
        stop: int | None = None
        try:
            # the signal is a Python flag read between steps: no sync
            while self.step < end and stop is None:
                self.train_step()
                bar.update(1)
                last = self.step == self.steps
                logged = self.step % self.log_every == 0 or last
                if logged:
                    rec = self.log()
                    bar.set_postfix(objective=f"{rec['objective_true']:.4g}",
                                    max_violation=f"{rec['max_violation']:.3g}")
                    if self.early_stop is not None and self.early_stop.observe(self):
                        end = self.step       # certified: the game ends here
                saved = bool(self.checkpoint_every) and self.step % self.checkpoint_every == 0
                if saved:
                    self.save_checkpoint()
                stop = self._stop_signal(signals, logged or saved or self.step == end)
        finally:
            bar.close()
            signals.stop()
        if self.logger is not None:
            self.logger.flush()
        stop = signals.received if self.parallel is None else stop
        if stop is not None:
            raise RunInterrupted(stop, self.step, self.save_checkpoint(), self.run_dir)
        if self.step < self.steps and not self.stopped_early:
            self.save_checkpoint()

    @property
    def stopped_early(self) -> bool:
        """Whether the early stop ended the game before ``steps``."""
        return self.early_stop is not None and bool(self.early_stop.stopped)

    def _stop_signal(self, signals: StopSignals, boundary: bool) -> int | None:
        """The signal that stops the loop after this step (``None``: go on). One process:
        its own, at every step. Data-parallel: the ranks agree at log and checkpoint steps
        (one ``all_reduce`` of one integer there, none in between), so that a signal to any
        rank stops every rank at the same step and none waits in the game's collective."""
        if self.parallel is None:
            return signals.received
        if not boundary:
            return None
        return agree_to_stop(signals.received, self.train.labels.device)

    # ------------------------------------------------------------------ logging
    @torch.no_grad()
    def log(self) -> dict[str, Any]:
        """Read the last step's values (syncs), log them, append them to the history."""
        copt = self.copt
        assert copt.last is not None and self._last is not None
        self._check_finite()
        rec = copt.last.to_host()
        terms = copt.terms
        names = copt.problem.constraint_names
        values = dict(zip(names, rec["constraints_true"], strict=True))
        equality = {n: c.sense == "==" for n, c in copt.problem.constraints.items()}
        violations = {n: (abs(v) if equality[n] else max(v, 0.0)) for n, v in values.items()}
        entry: dict[str, Any] = {
            "step": self.step,
            "objective_true": rec["objective_true"],
            "lagrangian": rec["objective_surrogate"],
            "constraints": values,
            "violations": violations,
            "max_violation": max(violations.values(), default=0.0),
            "multipliers": dict(zip(unique_names(terms.row_names), rec["multipliers"],
                                    strict=True)),
            "objective_weight": rec["objective_weight"],
            "slacks": dict(zip(unique_names(terms.slack_names), rec["slacks"], strict=True)),
            "empty_subsets": rec["empty_subsets"],
        }
        # Surrogate bounds on the last batch (the θ-player's view), in eval mode so that
        # logging draws no random numbers (dropout) and a resumed run logs the same.
        x, fields = self._last() if callable(self._last) else self._last
        scores = predict_scores(self.model, x, chunk=max(1, len(x)))   # one chunk
        batch = Batch(scores=scores, **fields)
        leaf_values = copt.evaluator(batch, update=False)
        objective = copt.problem.objective
        entry["objective_surrogate"] = _bound(objective, leaf_values) if objective is not None \
            else None
        entry["constraints_surrogate"] = {
            n: _bound(c.expression, leaf_values) for n, c in copt.problem.constraints.items()}
        if self.heldout is not None:
            # The game's record is on the held-out data; the gap to the training batch's true
            # values is what the two-dataset game is for, so it is logged beside it.
            entry["constraints_batch"] = {
                n: float(c.expression.evaluate(leaf_values))
                for n, c in copt.problem.constraints.items()}
        # unweighted (a balanced sampler's importance weights would weight the counts)
        entry["groups"] = batch_group_table(Batch(scores=scores, **{**fields, "weights": None}),
                                            self.protected, decision_threshold(self.model))
        if self.thresholds:
            entry["parity"] = parity_gaps(scores, fields["groups"][self.protected],
                                          fields["group_values"][self.protected],
                                          self.thresholds)
        entry["likely_infeasible"] = copt.likely_infeasible()
        # what plug-in players report of themselves (the DRO adversary's distance from p̂)
        scalars = {k: v for p in copt.players for k, v in p.log_scalars().items()}
        if scalars:
            entry["players"] = scalars
        if self.extra_scalars is not None:
            entry["extra"] = dict(self.extra_scalars(self.model))
        self.history.append(entry)
        if self.logger is not None:
            self.logger.scalars(self.step, _tags(entry, equality))
        LOG.info("step %d/%d: objective %.4g, max violation %.4g", self.step, self.steps,
                 entry["objective_true"], entry["max_violation"])
        return entry

    def _check_finite(self) -> None:
        """Stop at a step the game skipped for a non-finite value (one sync, at log time),
        naming the step and the latest checkpoint."""
        try:
            self.copt.check()
        except NonFiniteStepError as e:
            # the game counts steps from 0, the engine the steps done: step k is the k+1-th
            if self.last_checkpoint is None:
                where = "no checkpoint was written (trainer.checkpoint_every)"
            else:
                where = (f"the latest checkpoint is {self.last_checkpoint} (step "
                         f"{self._saved_step}; the skipped steps left no trace in it)")
            raise NonFiniteStepError(
                f"training stopped at step {self.step}: step {e.step + 1} met non-finite "
                f"{', '.join(e.kinds)} and was skipped ({e.count} step(s) skipped since the "
                f"last log); {where}. Remedy: lower the learning rate, clip the gradients "
                "(optimizer.grad_clip), or look for NaN/inf in the model's inputs; then "
                "retrain or resume",
                step=e.step, kinds=e.kinds, count=e.count) from e

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The loop's whole state (model, game, sampler, snapshots, history, RNG)."""
        return {
            "format": ENGINE_FORMAT,
            "step": self.step,
            "world_size": self.parallel_ranks,
            "model": self.model.state_dict(),
            "game": self.copt.state_dict(),
            "sampler": self.sampler.state_dict() if self.sampler is not None else None,
            "heldout_sampler": (self.heldout_sampler.state_dict()
                                if self.heldout_sampler is not None else None),
            "snapshots": self.snapshots.state_dict(),
            "extra_snapshots": (self.extra_snapshots.state_dict()
                                if self.extra_snapshots is not None else None),
            "history": self.history,
            "early_stop": (self.early_stop.state_dict() if self.early_stop is not None
                           else None),
            "rng": {"torch": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available()
                    else []},
        }

    @property
    def parallel_ranks(self) -> int:
        """The processes playing this run's game (1: no process group)."""
        return 1 if self.parallel is None else self.parallel.world_size

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (the game checks that the problem matches; a checkpoint
        of N ranks resumes on N ranks only)."""
        if state.get("format") != ENGINE_FORMAT:
            raise ValueError(f"the checkpoint has format {state.get('format')!r}; this version "
                             f"of fairgames reads format {ENGINE_FORMAT} only (format 1 "
                             "predates the plug-in players): start the run afresh, or resume "
                             "it with the fairgames version that wrote it")
        # (a checkpoint without the key predates data-parallel checkpoints: one process)
        saved, ranks = int(state.get("world_size", 1)), self.parallel_ranks
        if saved != ranks:
            raise ValueError(
                f"the checkpoint was written by a run on {saved} process(es), this run has "
                f"{ranks}: each rank's shard of the global batch, and so the game's rounding, "
                f"depends on the count: resume it on {saved} (torchrun --nproc_per_node "
                f"{saved} scripts/train.py trainer.distributed=true trainer.resume=<run dir>; "
                "python scripts/train.py trainer.resume=<run dir> for 1), or start afresh")
        self.model.load_state_dict(state["model"])
        self.copt.load_state_dict(state["game"])  # each player moves its tensors itself
        if self.sampler is not None:
            if state["sampler"] is None:
                raise ValueError("the checkpoint was trained full-batch, this run uses "
                                 "minibatches")
            self.sampler.load_state_dict(state["sampler"])
        elif state["sampler"] is not None:
            raise ValueError("the checkpoint was trained on minibatches, this run full-batch")
        held = state.get("heldout_sampler")
        if (held is None) != (self.heldout_sampler is None):
            raise ValueError("the checkpoint and this run differ in their held-out minibatches "
                             "(trainer.constraint_split)")
        if self.heldout_sampler is not None:
            self.heldout_sampler.load_state_dict(held)
        self.snapshots.load_state_dict(state["snapshots"])
        if self.extra_snapshots is not None:
            if state.get("extra_snapshots") is None:
                raise ValueError("the checkpoint holds no snapshots of the extra state this "
                                 "run records (robust.select=played): resume with the "
                                 "setting it was trained with, or start afresh")
            self.extra_snapshots.load_state_dict(state["extra_snapshots"])
        self.history = list(state["history"])
        if self.early_stop is not None and state.get("early_stop") is not None:
            self.early_stop.load_state_dict(state["early_stop"])
        self.step = self._saved_step = int(state["step"])
        torch.set_rng_state(state["rng"]["torch"])
        if state["rng"]["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])

    def save_checkpoint(self) -> Path | None:
        """Write ``checkpoint.pt`` in the run directory atomically, the one it replaces kept
        as ``checkpoint.prev.pt`` (:func:`~fairgames.train.loop.checkpoint.write_checkpoint`); a
        step already saved is not written again. Returns :attr:`last_checkpoint`.

        Raises:
            CheckpointError: the disk refused the write (full, read-only), naming the path and
                the remedy; the earlier checkpoints are intact.
        """
        if self.run_dir is None:
            return None
        if self._saved_step == self.step and self.last_checkpoint is not None:
            return self.last_checkpoint
        state = {"engine": self.state_dict()}
        if self.on_checkpoint is not None:
            self.on_checkpoint(state)
        self.last_checkpoint = write_checkpoint(state, self.run_dir)
        self._saved_step = self.step
        return self.last_checkpoint


class RunInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the training loop at a step boundary, after a checkpoint at
    that step was written (when the engine has a run directory).

    A ``KeyboardInterrupt``, so that ``except Exception`` does not swallow a request to stop.

    Attributes:
        signal_name: ``"SIGINT"`` or ``"SIGTERM"``.
        step: the steps played.
        checkpoint: the checkpoint holding that step (``None``: no run directory, nothing
            written).
        run_dir: the run directory (``trainer.resume=<run_dir>`` continues the run).
        exit_status: 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), the
            status a shell reports for a process that the signal ended.

    Example:
        >>> e = RunInterrupted(signal.SIGTERM, 7, Path("r/checkpoint.pt"), Path("r"))
        >>> e.exit_status, str(e).split("; ")[1]
        (143, 'resume with trainer.resume=r')
    """

    def __init__(self, signum: int, step: int, checkpoint: Path | None,
                 run_dir: Path | None) -> None:
        self.signal_name = signal.Signals(signum).name
        self.exit_status = 128 + int(signum)
        self.step, self.checkpoint, self.run_dir = step, checkpoint, run_dir
        where = (f"checkpoint {checkpoint} holds step {step}; resume with "
                 f"trainer.resume={run_dir}" if checkpoint is not None else
                 "no run directory, so no checkpoint was written: nothing to resume")
        super().__init__(f"{self.signal_name} at step {step}: {where}")


class StopSignals:
    """While active (a context manager), SIGINT and SIGTERM are recorded in ``received``
    instead of stopping the process, so that a loop can stop at its next step boundary; a
    second signal raises ``KeyboardInterrupt`` at once. Outside the main thread (where Python
    cannot set handlers) it does nothing.

    Example:
        >>> import os
        >>> with StopSignals() as signals:
        ...     os.kill(os.getpid(), signal.SIGTERM)
        ...     got = signals.received
        >>> got == signal.SIGTERM
        True
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def start(self) -> StopSignals:
        """Record the signals from now on (the ``with`` statement calls it)."""
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def stop(self) -> None:
        """Restore the handlers that were there before :meth:`start`."""
        for s, handler in self._previous.items():
            # None: a handler not set from Python; the default is the closest
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}

    def __enter__(self) -> StopSignals:
        return self.start()

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            raise KeyboardInterrupt
        self.received = signum

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _check_data(data: GameData, copt: ConstrainedOptimizer) -> None:
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


def _batch_fields(ds: TabularDataset, index: torch.Tensor | None,
                  baseline_scores: torch.Tensor | None, sampler: MinibatchSampler | None
                  ) -> dict[str, Any]:
    """The :class:`Batch` fields of ``ds``'s rows ``index`` (``None``: all of them)."""
    weights = None
    if index is None:
        labels, groups, base = ds.labels, ds.groups, baseline_scores
        # row ids of the split for per-example adversaries (made once: full-batch fields are)
        index = torch.arange(len(ds), device=ds.labels.device)
    else:
        labels = ds.labels[index]
        groups = {a: g[index] for a, g in ds.groups.items()}
        base = baseline_scores[index] if baseline_scores is not None else None
        if sampler is not None and sampler.balanced_by is not None:
            weights = sampler.importance_weights(index)
    return {"labels": labels, "label_kind": ds.label_kind, "groups": groups,
            "group_values": ds.group_names, "baseline_scores": base, "weights": weights,
            "example_ids": index}


def unique_names(names: list[str]) -> list[str]:
    """Names made unique by a ``#k`` suffix on repeats (so that no value is lost in a dict).

    Example:
        >>> unique_names(["a", "b", "a"])
        ['a', 'b', 'a#2']
    """
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}#{seen[n]}")
    return out


def _bound(expression, leaf_values) -> float | None:
    """The surrogate upper bound of an expression (None where none exists, e.g. KLD)."""
    try:
        return float(expression.evaluate(leaf_values, "upper"))
    except ValueError:
        return None


def _tags(entry: Mapping[str, Any], equality: Mapping[str, bool]) -> dict[str, float | None]:
    out: dict[str, float | None] = {
        "objective/true": entry["objective_true"],
        "objective/surrogate": entry["objective_surrogate"],
        "objective/lagrangian": entry["lagrangian"],
        "constraint/max_violation": entry["max_violation"],
        "multiplier/objective_weight": entry["objective_weight"],
        "game/likely_infeasible": float(entry["likely_infeasible"]),
        "game/empty_subsets": entry.get("empty_subsets"),
    }
    for name, v in entry["constraints"].items():
        out[f"constraint/{name}/value"] = v
        out[f"constraint/{name}/violation"] = entry["violations"][name]
        s = entry["constraints_surrogate"][name]
        out[f"constraint/{name}/surrogate_value"] = s
        out[f"constraint/{name}/surrogate_violation"] = None if s is None else (
            abs(s) if equality[name] else max(s, 0.0))
        if "constraints_batch" in entry:
            out[f"constraint/{name}/batch_value"] = entry["constraints_batch"][name]
    for row, lam in entry["multipliers"].items():
        out[f"multiplier/{row}"] = lam
    for name, v in entry["slacks"].items():
        out[f"slack/{name}"] = v
    for key, rates in entry["groups"].items():
        for rate, v in rates.items():
            if rate != "count":
                out[f"groups/{key}/{rate}"] = v
    for key, v in entry.get("parity", {}).items():
        out[f"parity/{key}"] = v
    out.update(entry.get("players", {}))
    out.update(entry.get("extra", {}))
    return {k: (None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v)
            for k, v in out.items()}
