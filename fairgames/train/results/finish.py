"""The pipeline's last two stages, the same for every method: **solutions** (the candidates'
final, best-iterate, stochastic and recommended solutions evaluated on every split, the
constraints' intervals and the verdict, the extensions' blocks, ``results.json`` checked
against the schema) and **report** (the run directory's files and the final TensorBoard
metrics).

Example:
    >>> sorted(STAGE_KEYS)
    ['report', 'solutions', 'validate']
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..context import RunContext, RunProblem
from ..evaluation import SolutionEvaluator
from ..loop.logger import run_logger
from ..method import Trained, extensions, one_extension
from .intervals import attach_intervals, constraint_intervals
from .outputs import log_final, write_files
from .recommend import recommend
from .report import SCHEMA_VERSION, clean_numbers, environment, validate_results
from .solutions import Selector, evaluate_solutions
from .sources import source_metrics
from .verdict import VERDICT_SOLUTION, run_verdict

# the seconds these stages take, in RunResult.extras["stage_seconds"] (validate: the schema
# check alone, inside solutions)
STAGE_KEYS = ("solutions", "validate", "report")


def evaluate_run(ctx: RunContext, built: RunProblem, trained: Trained,
                 evaluator: SolutionEvaluator,
                 baselines: Mapping[str, torch.Tensor] | None) -> dict[str, Any]:
    """The solutions stage: the candidates' solutions and the recommended one (in
    ``ctx.extras["solutions"]``), the constraints' intervals and the verdict, the extensions'
    blocks; returns ``results.json``'s content, checked against the schema."""
    inputs, splits, constraints = ctx.inputs, ctx.splits, built.constraints
    trainer, device = inputs.trainer, inputs.device
    assert trained.candidates is not None, "a stopped run has no solutions"
    selector = _selector(ctx, built, trained)
    results, choice, solutions = evaluate_solutions(trained.candidates, evaluator, trainer,
                                                    selector)
    (results["recommended"], choice["recommended"],
     solutions["recommended"]) = recommend(trained.candidates, evaluator, trainer,
                                           (results, choice, solutions), selector)
    ctx.extras["solutions"] = solutions
    record = trained.record(choice)
    started = time.perf_counter()
    intervals = (constraint_intervals(constraints, solutions, splits, inputs.protected,
                                      baselines, resamples=trainer.bootstrap, seed=inputs.seed,
                                      chunk=trainer.eval_chunk)
                 if trainer.bootstrap and constraints else {})
    attach_intervals(results, intervals)
    out = clean_numbers({"schema_version": SCHEMA_VERSION, "config": inputs.config,
                         "env": environment(device), "solutions": results,
                         "training": record})
    out["verdict"] = {**run_verdict(out, {c.name: c.sense for c in constraints},
                                    VERDICT_SOLUTION),
                      "resamples": trainer.bootstrap,
                      "seconds": time.perf_counter() - started}
    for ext in extensions():     # e.g. paper 004: true / noisy / robust violations per split
        block = ext.report(ctx, built, evaluator, solutions["recommended"], selector)
        if block is not None:
            out[ext.group] = clean_numbers(block)
    for ext in extensions():     # a family that asks other constraints judges them (paper 004)
        judged = ext.verdict(out)
        if judged is not None:
            out["verdict"] = {**out["verdict"], **clean_numbers(dict(judged))}
    if splits.metadata.get("crossed"):  # group_cross: cells kept, dropped, empty per split
        out["crossed_groups"] = splits.metadata["crossed"]
    if splits.metadata.get("sources_record"):    # data=sources: each source as resolved
        metrics = source_metrics(solutions["recommended"], splits,
                                 decision=evaluator.decision, chunk=trainer.eval_chunk)
        out["sources"] = clean_numbers({n: {**rec, "metrics": metrics.get(n, {})} for n, rec
                                        in splits.metadata["sources_record"].items()})
    checked = time.perf_counter()
    validate_results(out)
    ctx.extras.setdefault("stage_seconds", {})["validate"] = time.perf_counter() - checked
    return out


def _selector(ctx: RunContext, built: RunProblem, trained: Trained) -> Selector | None:
    """The extensions' solution selector (at most one; ``None``: the constraints as
    written choose)."""
    return one_extension("choose the solutions",
                         lambda ext: ext.selector(ctx, built, trained))


def write_run(ctx: RunContext, built: RunProblem, trained: Trained,
              results: Mapping[str, Any]) -> None:
    """The report stage: ``results.json``, ``report.md``, the group tables and the solution
    files, the method's own outputs, and the final metrics and hparams in TensorBoard."""
    inputs, run_dir = ctx.inputs, ctx.inputs.run_dir
    if run_dir is None:
        return
    logger = trained.logger or run_logger(run_dir, inputs.trainer)
    try:
        if trained.write is not None:      # first: report.md shows the plots it writes
            trained.write(Path(run_dir), results, logger)
        write_files(run_dir, dict(results), built.statements, ctx.extras["solutions"],
                    inputs.model.config, metadata=trained.metadata)
        log_final(logger, trained.steps, results)
        logger.artifacts()           # MLflow (trainer.mlflow): the files just written
    finally:
        if trained.logger is None:
            logger.close()
