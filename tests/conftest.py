"""Fixtures of the training tests: Hydra's compose API over ``configs/`` and cached runs.

Runs shared by several tests are session-scoped so that each is trained once. Helpers are
handed out through fixtures (pytest imports test modules in importlib mode). Under pytest-xdist
(``make test`` runs ``-n auto``) each worker plays on one torch thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

import fairgames.train.config  # noqa: F401  (registers the schema)
from fairgames.train import RunResult, run

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
# Small, quick synthetic runs: the unconstrained model violates equal opportunity by ~0.2.
FAST = ["data=synthetic", "data.n=3000", "data.group_shift=1.5", "trainer=smoke",
        "trainer.steps=300", "trainer.log_every=25", "trainer.snapshot_every=10",
        "optimizer.lr=0.05"]


def pytest_configure(config) -> None:
    # Each xdist worker is one of `-n N` busy processes: torch's default of one intra-op thread
    # per core would put N x cores threads on the cores, and OpenMP's spinning barriers then
    # cost more than the threads bring (the game's small matrix products run 2-3x slower with
    # 2 threads than with 1 on a loaded 2-core machine). Set in-process only, not through
    # OMP_NUM_THREADS: the launcher tests assert that their jobs set one thread themselves.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)


def _compose(*overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("train", overrides=list(overrides))


@pytest.fixture(scope="session")
def compose_cfg() -> Callable[..., DictConfig]:
    """``compose_cfg(*overrides)`` → the composed ``configs/train.yaml``."""
    return _compose


@pytest.fixture(scope="session")
def train_run(tmp_path_factory) -> Callable[..., RunResult]:
    """``train_run(name, *overrides, run_dir=None)`` → a run on the FAST settings (in a fresh
    directory unless ``run_dir`` is given)."""
    def go(name: str, *overrides: str, fast: bool = True, run_dir: Path | None = None
           ) -> RunResult:
        cfg = _compose(*(FAST if fast else []), *overrides)
        return run(cfg, run_dir=run_dir if run_dir is not None
                   else tmp_path_factory.mktemp(name))
    return go


@pytest.fixture(scope="session")
def eo_run(train_run) -> RunResult:
    """Equal opportunity on synthetic data, every output on (TensorBoard, plots)."""
    return train_run("eo", "problem=equal_opportunity", "trainer.plots=true",
                     "trainer.selection_split=train", "trainer.stochastic=shrunk")


@pytest.fixture(scope="session")
def unconstrained_run(train_run) -> RunResult:
    return train_run("unc", "problem=error")


def _same_run(resumed: RunResult, full: RunResult) -> None:
    a, b = full.results, resumed.results
    assert b["solutions"] == a["solutions"]
    drop = {"seconds"}
    assert {k: v for k, v in b["training"].items() if k not in drop} == {
        k: v for k, v in a["training"].items() if k not in drop}
    assert resumed.engine.history == full.engine.history
    for (n1, t1), (n2, t2) in zip(full.model.state_dict().items(),
                                  resumed.model.state_dict().items(), strict=True):
        assert n1 == n2 and torch.equal(t1, t2), n1


@pytest.fixture(scope="session")
def same_run() -> Callable[[RunResult, RunResult], None]:
    """``same_run(resumed, full)`` asserts that a resumed run ended exactly as the uninterrupted
    one: solutions, training record (but its seconds), history and every model tensor."""
    return _same_run
