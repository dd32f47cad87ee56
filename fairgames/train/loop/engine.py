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

import contextlib
import logging
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from fairgames.data import MinibatchSampler, SourcesSampler, TabularDataset
from fairgames.game import ConstrainedOptimizer, threshold_points
from fairgames.game.solutions import SnapshotRecorder
from fairgames.rates import Batch, EmptySubsetError

from ..data import predict_scores
from .captured import CapturedSteps
from .checkpoint import write_checkpoint
from .parallel import DataParallel, agree_to_stop, shard
from .records import check_finite, log_entry, tags, unique_names
from .settings import (
    BatchSettings,
    CheckpointSettings,
    GameData,
    LogSettings,
    SnapshotSettings,
    check_data,
)
from .signals import StopSignals, stop_at_once
from .state import ENGINE_FORMAT, engine_state, load_engine_state, restore_rng

# the names the engine's users import from here (its settings, its state's format)
__all__ = ["ENGINE_FORMAT", "BatchSettings", "CheckpointSettings", "Engine", "GameData",
           "LogSettings", "RunInterrupted", "SnapshotSettings", "StopSignals", "unique_names"]

# Each log interval's line (train.log under scripts/train.py); read at log time, no extra sync.
LOG = logging.getLogger(__name__)


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
                 # frozen dataclasses (.settings): immutable defaults
                 batches: BatchSettings = BatchSettings(),
                 logging: LogSettings = LogSettings(),
                 snapshots: SnapshotSettings = SnapshotSettings(),
                 checkpoints: CheckpointSettings = CheckpointSettings(),
                 parallel: DataParallel | None = None, early_stop: Any = None) -> None:
        check_data(data, copt)
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
        if batches.per_source:       # several data sets: each source's own batches
            if not self.full_batch or balanced_by is not None:
                raise ValueError("per-source batch sizes replace the batch size and balanced "
                                 "batches: leave both unset")
            self.full_batch = False
            self.sampler = SourcesSampler(train, dict(batches.sources or {}), seed=batches.seed)
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

    def finishing(self) -> contextlib.AbstractContextManager[None]:
        """A context for the work after the last step (the candidates' scores, the final
        evaluation, the report): SIGINT or SIGTERM there stop at once with a checkpoint at the
        last step (written then, if ``checkpoint_every`` did not) and a :class:`RunInterrupted`
        that says how to finish: resuming evaluates and reports without training again."""
        def interrupted(signum: int) -> RunInterrupted:
            return RunInterrupted(signum, self.step, self.save_checkpoint(), self.run_dir,
                                  trained=True)
        return stop_at_once(interrupted)

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
        """Read the last step's values (syncs), log them, append them to the history
        (:func:`~fairgames.train.loop.records.log_entry`)."""
        copt = self.copt
        assert copt.last is not None and self._last is not None
        check_finite(copt, self.step, self.last_checkpoint, self._saved_step)
        entry, equality = log_entry(self, self._last)
        self.history.append(entry)
        if self.logger is not None:
            self.logger.scalars(self.step, tags(entry, equality))
        LOG.info("step %d/%d: objective %.4g, max violation %.4g", self.step, self.steps,
                 entry["objective_true"], entry["max_violation"])
        return entry

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The loop's whole state (model, game, sampler, snapshots, history, RNG;
        :func:`~fairgames.train.loop.state.engine_state`)."""
        return engine_state(self)

    @property
    def parallel_ranks(self) -> int:
        """The processes playing this run's game (1: no process group)."""
        return 1 if self.parallel is None else self.parallel.world_size

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (the game checks that the problem matches; a checkpoint
        of N ranks resumes on N ranks only)."""
        load_engine_state(self, state)
        self.step = self._saved_step = int(state["step"])
        restore_rng(state)

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
                 run_dir: Path | None, *, trained: bool = False) -> None:
        self.signal_name = signal.Signals(signum).name
        self.exit_status = 128 + int(signum)
        self.step, self.checkpoint, self.run_dir = step, checkpoint, run_dir
        where = (f"checkpoint {checkpoint} holds step {step}; resume with "
                 f"trainer.resume={run_dir}" if checkpoint is not None else
                 "no run directory, so no checkpoint was written: nothing to resume")
        if trained and checkpoint is not None:
            where += " (it evaluates and reports the trained run without training again)"
        when = (f"after the last step ({step}), during the final evaluation" if trained
                else f"at step {step}")
        super().__init__(f"{self.signal_name} {when}: {where}")


def _batch_fields(ds: TabularDataset, index: torch.Tensor | None,
                  baseline_scores: torch.Tensor | None,
                  sampler: MinibatchSampler | SourcesSampler | None
                  ) -> dict[str, Any]:
    """The :class:`Batch` fields of ``ds``'s rows ``index`` (``None``: all of them)."""
    weights = None
    if index is None:
        labels, groups, base = ds.labels, ds.groups, baseline_scores
        sources = ds.sources
        # row ids of the split for per-example adversaries (made once: full-batch fields are)
        index = torch.arange(len(ds), device=ds.labels.device)
    else:
        labels = ds.labels[index]
        groups = {a: g[index] for a, g in ds.groups.items()}
        base = baseline_scores[index] if baseline_scores is not None else None
        sources = ds.sources[index] if ds.sources is not None else None
        # balanced or per-source batches: re-weighted to the population (a gather, no sync)
        if sampler is not None and (sampler.balanced_by is not None
                                    or getattr(sampler, "weighted", False)):
            weights = sampler.importance_weights(index)
    fields = {"labels": labels, "label_kind": ds.label_kind, "groups": groups,
              "group_values": ds.group_names, "baseline_scores": base, "weights": weights,
              "example_ids": index}
    if sources is not None:       # several data sets (paper 001): rates on one source
        fields.update(sources=sources, source_names=ds.source_names,
                      unlabeled_sources=ds.unlabeled)
    return fields
