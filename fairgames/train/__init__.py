"""Training from configs or from Python: the pipeline, the engine, TensorBoard logging, reports.

A paper family plugs into the pipeline through the seam :mod:`fairgames.train.method`;
importing the run's config (:mod:`fairgames.train.config`) loads the families
(:mod:`fairgames.families`).

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

from .config import (
    AlgorithmConfig,
    ConfigError,
    ModelConfig,
    OptimizerConfig,
    ProblemConfig,
    TrainConfig,
    TrainerConfig,
    validate,
)
from .evaluation import SolutionEvaluator
from .group_tables import batch_group_table, group_rates, group_table
from .loop.checkpoint import (
    CheckpointError,
    CheckpointWarning,
    NoCheckpointError,
    find_checkpoint,
    load_checkpoint,
    read_latest,
    save_atomic,
    write_checkpoint,
)
from .loop.engine import (
    BatchSettings,
    CheckpointSettings,
    Engine,
    GameData,
    LogSettings,
    RunInterrupted,
    SnapshotSettings,
)
from .loop.logger import RunLogger
from .method import Extension, Method, Trained
from .results.report import load_schema, validate_results
from .run import RunResult, fit, run

__all__ = [
    "AlgorithmConfig",
    "BatchSettings",
    "CheckpointError",
    "CheckpointWarning",
    "NoCheckpointError",
    "CheckpointSettings",
    "ConfigError",
    "Engine",
    "Extension",
    "GameData",
    "LogSettings",
    "Method",
    "ModelConfig",
    "OptimizerConfig",
    "ProblemConfig",
    "RunLogger",
    "RunInterrupted",
    "RunResult",
    "SnapshotSettings",
    "SolutionEvaluator",
    "Trained",
    "TrainConfig",
    "TrainerConfig",
    "batch_group_table",
    "find_checkpoint",
    "fit",
    "group_rates",
    "group_table",
    "load_checkpoint",
    "load_schema",
    "read_latest",
    "run",
    "save_atomic",
    "validate",
    "validate_results",
    "write_checkpoint",
]
