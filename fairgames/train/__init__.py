"""Training from configs or from Python: the pipeline, the engine, TensorBoard logging, reports.

The public names below load on first use: importing one of ``fairgames.train``'s modules
(as a paper family's modules do, to plug into the seam :mod:`fairgames.train.method`) runs
nothing else. The pipeline, :mod:`fairgames.train.run`, loads the paper families
(:mod:`fairgames.families`) when it is imported.

Example:
    >>> import torch
    >>> from fairgames.data import make_synthetic
    >>> from fairgames.train import fit
    >>> splits = make_synthetic(n=600, d=4, seed=0)
    >>> result = fit(torch.nn.Linear(4, 1), "demographic_parity", splits, protected="group",
    ...              trainer={"steps": 20, "log_every": 10})
    >>> result.results["training"]["steps"]
    20
"""

from __future__ import annotations

import importlib
from typing import Any

# public name → the module that defines it
_PUBLIC = {
    **dict.fromkeys(("AlgorithmConfig", "ConfigError", "ModelConfig", "OptimizerConfig",
                     "ProblemConfig", "TrainConfig", "TrainerConfig", "validate"), "config"),
    **dict.fromkeys(("SolutionEvaluator", "batch_group_table", "group_rates", "group_table"),
                    "evaluation"),
    **dict.fromkeys(("CheckpointError", "CheckpointWarning", "NoCheckpointError",
                     "find_checkpoint", "load_checkpoint", "read_latest", "save_atomic",
                     "write_checkpoint"), "loop.checkpoint"),
    **dict.fromkeys(("BatchSettings", "CheckpointSettings", "Engine", "GameData", "LogSettings",
                     "RunInterrupted", "SnapshotSettings"), "loop.engine"),
    "RunLogger": "loop.logger",
    **dict.fromkeys(("Extension", "Method", "Trained"), "method"),
    **dict.fromkeys(("load_schema", "validate_results"), "results.report"),
    **dict.fromkeys(("RunResult", "fit", "run"), "run"),
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'fairgames.train' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
