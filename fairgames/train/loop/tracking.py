"""MLflow beside TensorBoard (``trainer.mlflow``): the run's scalars at every log interval, its
hparams as MLflow params, and at the end its files (``results.json``, ``report.md``, the tables
and the plots) as artifacts — the same values the run's TensorBoard events hold.

``trainer.mlflow``: ``auto`` (the default) sends them where the ``mlflow`` package is installed
(``pip install mlflow-skinny`` is enough) and ``MLFLOW_TRACKING_URI`` names a tracking store, so
that installing the package alone never makes every run write an ``./mlruns`` store; ``true``
sends them wherever MLflow's own default store is (an error names the package when it is
missing); ``false`` never. The experiment is ``MLFLOW_EXPERIMENT_NAME``, else ``fairgames``; the
MLflow run is named after the run directory, and its id is kept there (``mlflow.json``), so a
resumed run continues its MLflow run rather than starting another.

Example:
    >>> mlflow_key("constraint/tpr[group=1]/value")
    'constraint/tpr_group_1_/value'
    >>> wanted("auto", {}), wanted(False, {"MLFLOW_TRACKING_URI": "file:/x"})
    (False, False)
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..files import write_text

RUN_FILE = "mlflow.json"                 # the MLflow run id, in the run directory
ARTIFACTS = ("results.json", "report.md", "groups.csv", "constraints.csv", "metrics.json")
_BAD = re.compile(r"[^A-Za-z0-9_\-. /]")  # what MLflow refuses in a metric or param key
PARAM_CHARS = 500                         # MLflow's longest param value (older stores)


def mlflow_key(tag: str) -> str:
    """A TensorBoard tag as an MLflow key (MLflow takes letters, digits, ``_ - . /`` and
    spaces)."""
    return _BAD.sub("_", tag)


def wanted(setting: Any, environ: Mapping[str, str]) -> bool:
    """Whether ``trainer.mlflow=setting`` sends this run to MLflow (module docstring).

    Raises:
        ImportError: ``true`` without the package (the message names it).
    """
    installed = importlib.util.find_spec("mlflow") is not None
    if setting is True:
        if not installed:
            raise ImportError("trainer.mlflow=true needs MLflow: pip install mlflow-skinny "
                              "(or set trainer.mlflow=false)")
        return True
    return setting == "auto" and installed and bool(environ.get("MLFLOW_TRACKING_URI"))


class MlflowMirror:
    """One MLflow run receiving what :class:`~fairgames.train.loop.logger.RunLogger` writes
    (through ``mlflow.MlflowClient``: no global active run is left behind)."""

    def __init__(self, run_dir: Path) -> None:
        from mlflow import MlflowClient

        self.client, self.run_dir = MlflowClient(), Path(run_dir)
        stored = self.run_dir / RUN_FILE
        if stored.is_file():                 # a resumed run continues its MLflow run
            self.run_id = json.loads(stored.read_text())["run_id"]
            self.client.update_run(self.run_id, status="RUNNING")
            return
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or "fairgames"
        found = self.client.get_experiment_by_name(name)
        experiment = found.experiment_id if found else self.client.create_experiment(name)
        self.run_id = self.client.create_run(experiment, run_name=self.run_dir.name).info.run_id
        write_text(stored, json.dumps({"run_id": self.run_id,
                                       "tracking_uri": self.client.tracking_uri}) + "\n")

    def metrics(self, step: int, values: Mapping[str, float]) -> None:
        """Log ``key → value`` at ``step`` in one batch (keys already TensorBoard tags)."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(mlflow_key(k), float(v), now, step) for k, v in values.items()]
        for i in range(0, len(batch), 1000):     # MLflow's batch limit
            self.client.log_batch(self.run_id, metrics=batch[i:i + 1000])

    def params(self, hparams: Mapping[str, Any]) -> None:
        """The run's settings as params (set once: a resumed run logs the same values)."""
        from mlflow.entities import Param

        batch = [Param(mlflow_key(k), str(v)[:PARAM_CHARS]) for k, v in hparams.items()]
        for i in range(0, len(batch), 100):      # MLflow's batch limit for params
            self.client.log_batch(self.run_id, params=batch[i:i + 100])

    def artifacts(self) -> None:
        """The run's report files and plots, as they are in the run directory now."""
        for path in sorted(self.run_dir.iterdir()):
            if path.name in ARTIFACTS or path.suffix == ".png":
                self.client.log_artifact(self.run_id, str(path))

    def close(self) -> None:
        """End the MLflow run: FINISHED once the run wrote its results, else KILLED (stopped or
        interrupted with a checkpoint: resuming reopens it)."""
        done = (self.run_dir / "results.json").is_file()
        self.client.set_terminated(self.run_id, status="FINISHED" if done else "KILLED")
