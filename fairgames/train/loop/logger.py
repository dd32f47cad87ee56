"""TensorBoard logging for a run, written at logging intervals only.

Tags (``/`` groups them in TensorBoard):

* ``objective/true``, ``objective/surrogate`` (the θ-player's bound of the objective),
  ``objective/lagrangian`` (the θ-player's whole loss);
* ``constraint/<name>/value`` and ``/violation`` (true rates), ``/surrogate_value`` and
  ``/surrogate_violation`` (the surrogate bound); ``constraint/max_violation``;
* ``multiplier/<row>`` for every multiplier row, ``multiplier/objective_weight``;
* ``slack/<name>`` for every slack (ξ, a, b);
* ``parity/worst_gap`` and ``parity/<value>/max_gap`` where the problem reads threshold
  rates (paper 003's statistical parity): the worst |P[f ≥ z | A=a] − P[f ≥ z]| over its
  thresholds on the training batch, overall and per group;
* ``groups/<attribute>=<value>/<rate>`` on the training batch;
* with noisy groups (paper 004): ``robust/{noisy,true,tv,sa}/...`` on the whole training
  split, ``dro/distance/<value>``, ``soft_assignments/w/<noisy>/<ŷy>/<true>``
  (docs/noisy_groups.md);
* ``game/likely_infeasible``; ``game/empty_subsets`` (the step's subsets with no weight in
  its batch, whose rates read running estimates);
* at the end, hparams and ``final/<solution>/<split>/<metric>`` (all in one event file).

With ``trainer.mlflow``, the same scalars and hparams, and the run's files at the end, go to
MLflow too (:mod:`.tracking`; :func:`run_logger` builds the logger a run uses).

``<=`` / ``>=`` in names become ``le`` / ``ge``, and other characters outside
``[A-Za-z0-9_.\\-/=\\[\\]]`` become ``_``.

Example:
    >>> clean_tag("constraint/f1_parity:ratio.num <= slack")
    'constraint/f1_parity_ratio.num_le_slack'
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_BAD = re.compile(r"[^A-Za-z0-9_.\-/=\[\]]+")


def clean_tag(tag: str) -> str:
    """A TensorBoard-safe tag.

    Example:
        >>> clean_tag("constraint/tpr(group=1) >= 0.8")
        'constraint/tpr_group=1_ge_0.8'
    """
    return _BAD.sub("_", tag.replace("<=", "le").replace(">=", "ge"))


class RunLogger:
    """A thin wrapper of ``torch.utils.tensorboard.SummaryWriter`` (disabled: a no-op).

    Args:
        log_dir: the run directory (event files go here).
        enabled: write anything at all.
        purge_step: on resume, events at or after this step from the killed run are dropped.

    Example:
        A disabled logger (no ``log_dir``) accepts every call and writes nothing; with a
        directory, the same calls write one TensorBoard event file there.

        >>> log = RunLogger(None)
        >>> log.scalars(10, {"objective/true": 0.25, "constraint/eo/violation": None})
        >>> log.flush(); log.close()
        >>> log.writer is None
        True
    """

    def __init__(self, log_dir: Path | None, enabled: bool = True,
                 purge_step: int | None = None, mirror: Any = None) -> None:
        self.writer = None
        # another tracker receiving the same values (trainer.mlflow: tracking.MlflowMirror)
        self.mirror = mirror
        if enabled and log_dir is not None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(log_dir), purge_step=purge_step)

    def scalars(self, step: int, values: Mapping[str, float | None]) -> None:
        """Log ``tag → value`` at ``step`` (``None`` and NaN values are skipped)."""
        kept = {clean_tag(tag): float(v) for tag, v in values.items()
                if v is not None and v == v}
        if self.mirror is not None:
            self.mirror.metrics(step, kept)
        if self.writer is None:
            return
        for tag, v in kept.items():
            self.writer.add_scalar(tag, v, step)

    def hparams(self, hparams: Mapping[str, Any], metrics: Mapping[str, float | None]) -> None:
        """Write the run's hyper-parameters and final metrics for TensorBoard's HParams tab
        (and as params of the mirror's run)."""
        hp = {clean_tag(k): (v if isinstance(v, int | float | str | bool) else str(v))
              for k, v in hparams.items()}
        if self.mirror is not None:
            self.mirror.params(hp)
        if self.writer is None:
            return
        ms = {clean_tag(k): float(v) for k, v in metrics.items() if v is not None and v == v}
        # SummaryWriter.add_hparams opens a second writer (a second event file, every metric
        # written again at step 0); the run's own writer carries the hparams summaries, and
        # the HParams plugin reads the metrics from the scalars the run logs under those tags.
        from torch.utils.tensorboard.summary import hparams as hparams_summaries

        file_writer = self.writer._get_file_writer()
        for summary in hparams_summaries(hp, ms):
            file_writer.add_summary(summary)

    def flush(self) -> None:
        """Flush pending events to disk."""
        if self.writer is not None:
            self.writer.flush()

    def artifacts(self) -> None:
        """Send the run's report files and plots to the mirror (none without one)."""
        if self.mirror is not None:
            self.mirror.artifacts()

    def close(self) -> None:
        """Flush and close the event file, and end the mirror's run (further calls are
        no-ops)."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self.mirror is not None:
            self.mirror.close()
            self.mirror = None


def run_logger(run_dir: Path | None, trainer: Any, purge_step: int | None = None) -> RunLogger:
    """The logger of a run writing to ``run_dir`` under ``trainer``'s settings: TensorBoard
    (``trainer.tensorboard``) and MLflow (``trainer.mlflow``, :mod:`.tracking`)."""
    from .tracking import MlflowMirror, wanted

    mirror = None
    if run_dir is not None and wanted(getattr(trainer, "mlflow", False), os.environ):
        try:
            mirror = MlflowMirror(run_dir)
        except Exception as e:   # MLflow's own errors (a bad URI, a store it refuses, ...)
            from ..config.errors import ConfigError

            uri = os.environ.get("MLFLOW_TRACKING_URI", "MLflow's default")
            raise ConfigError(
                f"trainer.mlflow: MLflow cannot open the tracking store {uri!r} "
                f"({type(e).__name__}: {str(e)[:300]}): set MLFLOW_TRACKING_URI to a store it "
                "takes (e.g. sqlite:///mlflow.db, or http://host:5000), or trainer.mlflow=false"
            ) from e
    return RunLogger(run_dir, enabled=trainer.tensorboard and run_dir is not None,
                     purge_step=purge_step, mirror=mirror)
