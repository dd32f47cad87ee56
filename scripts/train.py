"""Train from the command line: ``python scripts/train.py [overrides]``.

With no override this is a quick, real job (``configs/train.yaml``: equal opportunity on
Adult by sex, a linear model, the proxy-Lagrangian). Examples::

    python scripts/train.py problem=fmeasure_parity data=compas trainer.steps=2000
    python scripts/train.py problem=kld_error algorithm=algorithm2
    python scripts/train.py -m problem.tolerance=0.01,0.02,0.05 seed=0,1,2
    python scripts/train.py trainer.resume=runs/<date>/<time>_<problem>_<data>   # its config
    python scripts/train.py problem=fmeasure_parity trainer.tune=validation

Outputs go to the run directory (``runs/...``, or ``multirun/...`` for ``-m``): the resolved
config (``.hydra/``), TensorBoard events, ``results.json``, ``report.md``, ``dynamics.png``,
``recommended.pt`` (the solution to deploy, the one the last line reports) /
``final.pt`` / ``best_iterate.pt`` / ``stochastic.pt`` and ``checkpoint.pt`` (and the one
before it, ``checkpoint.prev.pt``). SIGINT (Ctrl-C) or SIGTERM stops training at the next
step with a checkpoint there, prints how to resume and exits with 130 or 143. With
``trainer.tune=validation`` the run is a grid of step sizes on the joblib launcher
(``sweep/``), ``tune.json`` and the chosen job's outputs (``fairgames.train.sweeps.tune``). Config
errors (Hydra's own: an unknown group option or key, an override that does not parse; ours:
bad values, a problem string that does not parse, a data option the loader refuses) are
reported in one message without a traceback and exit with status 2; a missing or damaged raw
data file exits with status 1. ``families=[module,...]`` imports families of your own before
the config is composed (:mod:`fairgames.families`), so that their options compose. The value
returned to a Hydra sweeper is :func:`fairgames.train.sweeps.score.score`'s: the validation
objective of a run that meets its constraints on train, more than any such for one that does
not; never test.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import hydra
import torch.distributed
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

import fairgames.train.config  # noqa: F401  (registers the config schema)
from fairgames.data import DataError
from fairgames.families import FamilyError, from_argv
from fairgames.families import load as load_families
from fairgames.problems import ProblemError
from fairgames.rates import EmptySubsetError
from fairgames.train import CheckpointError, ConfigError, RunInterrupted, run, validate
from fairgames.train.cli import HYDRA_ERRORS, hydra_message, one_message
from fairgames.train.config.resume import hydra_resume_args, hydra_run_dir_args
from fairgames.train.files import OutputError
from fairgames.train.loop.checkpoint import NoCheckpointError
from fairgames.train.loop.parallel import hydra_args, leave, writes_outputs
from fairgames.train.method import summary_lines
from fairgames.train.results.early_stop import early_stop_line
from fairgames.train.results.report import largest_violation
from fairgames.train.results.sources import source_lines
from fairgames.train.results.verdict import verdict_lines
from fairgames.train.run_dir import RunDirError, refuse_shared_multirun
from fairgames.train.run_dir import hydra_args as run_dir_args
from fairgames.train.sweeps.launch import LAUNCHERS
from fairgames.train.sweeps.score import score
from fairgames.train.sweeps.tune import bars_garble, one_thread_per_job, tune

CONFIGS = str(Path(__file__).resolve().parents[1] / "configs")
# Hydra's own (an unknown group option or key, an override that does not parse, a value of
# the wrong type) and ours (bad values, a problem that does not compile).
CONFIG_ERRORS = (*HYDRA_ERRORS, ConfigError, ProblemError)
# Hydra's job logging writes the root logger to <run dir>/train.log only (configs/train.yaml):
# the lines printed here, and the engine's log intervals, are also in the run's log.
LOG = logging.getLogger("fairgames")


def say(text: str, err: bool = False) -> None:
    """Print ``text`` (to stderr with ``err``) and write it to the run's ``train.log``."""
    print(text, file=sys.stderr if err else sys.stdout)
    LOG.log(logging.ERROR if err else logging.INFO, text)


@hydra.main(config_path=CONFIGS, config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    hydra_cfg = HydraConfig.get()
    run_dir = cfg.run_dir or hydra_cfg.runtime.output_dir
    one_thread_per_job(hydra_cfg.get("launcher"))
    try:                                 # job 1 of a sweep would overwrite job 0
        refuse_shared_multirun(cfg.run_dir, cfg._get_node("run_dir")._value(),
                               hydra_cfg.mode == RunMode.MULTIRUN)
    except RunDirError as e:
        say(f"error: {e}", err=True)
        sys.exit(2)
    if bars_garble(hydra_cfg.get("launcher"), hydra_cfg.overrides.task):
        # each job says when it starts and prints its summary when it ends
        cfg.trainer.progress = False
        say(f"job {hydra_cfg.job.num} started: {' '.join(hydra_cfg.overrides.task)}")
    LOG.info("run directory %s; overrides: %s", run_dir, " ".join(hydra_cfg.overrides.task))
    if cfg.trainer.tune is not None:
        return _tuned(cfg, run_dir, list(hydra_cfg.overrides.task))
    finished = False                     # every rank done or stopped at the agreed step
    try:
        result = run(cfg, run_dir=run_dir, overrides=list(hydra_cfg.overrides.task))
        finished = True
    except (ConfigError, ProblemError, EmptySubsetError, NoCheckpointError, FamilyError) as e:
        say(f"error: {e}", err=True)
        sys.exit(2)
    # a file missing or damaged, or a disk that refuses a write: the message says what to do
    except (DataError, CheckpointError, OutputError) as e:
        say(f"error: {e}", err=True)
        sys.exit(1)
    except RunInterrupted as e:
        finished = True
        if not writes_outputs():
            sys.exit(e.exit_status)
        say(f"interrupted: {e}", err=True)
        if e.checkpoint is not None:
            say(f"resume with: {resume_command(e.run_dir, ranks())}", err=True)
        sys.exit(e.exit_status)
    finally:
        quiet = not writes_outputs()         # a rank other than 0 of trainer.distributed
        leave(finished=finished)
    if quiet:                            # rank 0 reports
        return None
    if result.results is None:
        say(f"stopped at step {result.engine.step} (trainer.stop_after): checkpoint "
            f"{result.engine.last_checkpoint}; resume with: "
            f"{resume_command(result.run_dir, result.engine.parallel_ranks)}")
        return sweeper_value(None)
    say(summary_line(result.run_dir, result.results))
    for line in source_lines(result.results):    # data=sources: each source's test rates
        say(line)
    stopped = early_stop_line(result.results)
    if stopped is not None:                  # trainer.early_stop ended the game: where, why
        say(stopped)
    for line in summary_lines(result.results):   # the families' own: robust, reduction, ...
        say(line)
    say("\n".join(verdict_lines(result.results["verdict"])))
    return sweeper_value(result.results)


def sweeper_value(results: dict | None) -> float:
    """What a Hydra sweeper minimises (:mod:`fairgames.train.sweeps.score`): the validation
    objective of a run feasible on train, more than any such for one that is not; never test.
    Under ``-m`` a run it cannot score says so."""
    value, warning = score(results)
    if warning is not None and HydraConfig.get().mode == RunMode.MULTIRUN:
        say(f"warning: {warning}", err=True)
    return value


def resume_command(run_dir: Path | str | None, world_size: int = 1) -> str:
    """The command that continues the run in ``run_dir`` (its config is the checkpoint's) on
    ``world_size`` processes (a checkpoint of N ranks resumes on N ranks).

    Example:
        >>> resume_command("runs/x")
        'python scripts/train.py trainer.resume=runs/x'
        >>> resume_command("runs/x", 2).split(" scripts/train.py ")
        ['torchrun --nproc_per_node 2', 'trainer.distributed=true trainer.resume=runs/x']
    """
    if world_size > 1:
        return (f"torchrun --nproc_per_node {world_size} scripts/train.py "
                f"trainer.distributed=true trainer.resume={run_dir}")
    return f"python scripts/train.py trainer.resume={run_dir}"


def ranks() -> int:
    """The processes of this run: torch.distributed's world size, else 1."""
    return torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1


def summary_line(run_dir: Path | str | None, results: dict) -> str:
    """The run's last line: the recommended solution (``recommended.pt``) on train and test.

    Example:
        >>> m = {"objective": 0.2, "error": 0.2, "constraints": {"c": {"violation": 0.01}}}
        >>> line = summary_line("runs/x", {"solutions": {"recommended": {"train": m, "test": m}},
        ...                      "training": {"recommended": {"solution": "lp_mixture"}}})
        >>> line.split(": ", 1)[1].split(", ")[:2]
        ['recommended (lp_mixture) on test: objective 0.2000', 'error 0.2000']
    """
    rec = results["solutions"]["recommended"]

    def worst(m: dict) -> str:
        v = largest_violation(m)
        return "undefined" if v is None else f"{v:.4f}"   # None: a constraint with no row

    test = rec["test"]
    headline = ", ".join(f"{k} {test[k]:.4f}" for k in ("error", "mse", "mae", "ks_disparity")
                         if k in test)
    objective = "–" if test["objective"] is None else f"{test['objective']:.4f}"
    return (f"{run_dir}: recommended ({results['training']['recommended']['solution']}) on "
            f"test: objective {objective}, {headline}, max violation {worst(test)}; "
            f"on train: max violation {worst(rec['train'])}")


def _tuned(cfg: DictConfig, run_dir: str, overrides: list[str]) -> float:
    """``trainer.tune=validation``: the sweep, the choice, and the chosen job's summary."""
    try:
        validate(cfg)
        record = tune(cfg, run_dir, overrides, script=Path(__file__).resolve())
    except (ConfigError, ProblemError) as e:
        say(f"error: {e}", err=True)
        sys.exit(2)
    except RuntimeError as e:
        say(f"error: {e}", err=True)
        sys.exit(1)
    chosen = next(c for c in record["candidates"] if c["chosen"])
    settings = ", ".join(f"{k}={v}" for k, v in chosen["settings"].items())
    say(f"{run_dir}: tuned on validation over {len(record['candidates'])} runs; chose job "
        f"{record['chosen']} ({settings}): {record['reason']}")
    results = json.loads((Path(run_dir) / "results.json").read_text())
    say(summary_line(run_dir, results))
    say("\n".join(verdict_lines(results["verdict"])))
    return sweeper_value(results)


def cli() -> None:
    """``main`` with every config error, Hydra's included, as one message and exit status 2
    (:func:`fairgames.train.cli.one_message`)."""
    one_message(main, CONFIG_ERRORS, _message)


def _message(e: BaseException) -> str:
    """:func:`~fairgames.train.cli.hydra_message`; for a launcher Hydra cannot find, the plugin
    that provides it."""
    text = hydra_message(e)
    for name, (_, package) in LAUNCHERS.items():
        if package is not None and f"'hydra/launcher/{name}'" in text:
            text += f"\nthe {name} launcher comes with a plugin: pip install {package}"
    return text


def families(argv: list[str]) -> None:
    """Import the families a ``families=[...]`` override names, before Hydra composes the
    config (their groups and options must be registered by then)."""
    try:
        load_families(from_argv(argv))
    except FamilyError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    families(sys.argv[1:])
    sys.argv[1:] = hydra_resume_args(sys.argv[1:])   # keep a resumed run's .hydra/ record
    # torchrun: rank 0 writes (the other ranks' hydra.run.dir is ".", before run_dir's)
    sys.argv[1:] = hydra_args(sys.argv[1:], os.environ.get("RANK"))
    sys.argv[1:] = hydra_run_dir_args(sys.argv[1:])  # run_dir=...: .hydra/ and train.log there
    try:              # a file as run_dir; another run's .hydra/ record kept until it is decided
        sys.argv[1:] = run_dir_args(sys.argv[1:])
    except RunDirError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    cli()
