"""TensorBoard logging for a run, written at logging intervals only.

Tags (``/`` groups them in TensorBoard):

* ``objective/true``, ``objective/surrogate`` (the θ-player's bound of the objective),
  ``objective/lagrangian`` (the θ-player's whole loss);
* ``constraint/<name>/value`` and ``/violation`` (true rates), ``/surrogate_value`` and
  ``/surrogate_violation`` (the surrogate bound); ``constraint/max_violation``;
* ``multiplier/<row>`` for every multiplier row, ``multiplier/objective_weight``;
* ``slack/<name>`` for every slack (ξ, a, b);
* ``groups/<attribute>=<value>/<rate>`` on the training batch;
* ``game/likely_infeasible``; at the end, hparams and ``final/<solution>/<split>/<metric>``.

``<=`` / ``>=`` in names become ``le`` / ``ge``, and other characters outside
``[A-Za-z0-9_.\\-/=\\[\\]]`` become ``_``.

Example:
    >>> clean_tag("constraint/f1_parity:ratio.num <= slack")
    'constraint/f1_parity_ratio.num_le_slack'
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_BAD = re.compile(r"[^A-Za-z0-9_.\-/=\[\]]+")


def clean_tag(tag: str) -> str:
    """A TensorBoard-safe tag."""
    return _BAD.sub("_", tag.replace("<=", "le").replace(">=", "ge"))


class RunLogger:
    """A thin wrapper of ``torch.utils.tensorboard.SummaryWriter`` (disabled: a no-op).

    Args:
        log_dir: the run directory (event files go here).
        enabled: write anything at all.
        purge_step: on resume, events at or after this step from the killed run are dropped.
    """

    def __init__(self, log_dir: Path | None, enabled: bool = True,
                 purge_step: int | None = None) -> None:
        self.writer = None
        if enabled and log_dir is not None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(log_dir), purge_step=purge_step)

    def scalars(self, step: int, values: Mapping[str, float | None]) -> None:
        if self.writer is None:
            return
        for tag, v in values.items():
            if v is None or v != v:
                continue
            self.writer.add_scalar(clean_tag(tag), float(v), step)

    def hparams(self, hparams: Mapping[str, Any], metrics: Mapping[str, float | None]) -> None:
        if self.writer is None:
            return
        hp = {clean_tag(k): (v if isinstance(v, int | float | str | bool) else str(v))
              for k, v in hparams.items()}
        ms = {clean_tag(k): float(v) for k, v in metrics.items() if v is not None and v == v}
        self.writer.add_hparams(hp, ms, run_name=".")

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
