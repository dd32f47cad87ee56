"""What the training loop logs at a log step: the history entry read from the game's last
:class:`~fairgames.game.StepRecord` and the last batch (:func:`log_entry`), its TensorBoard
tags (:func:`tags`), and the stop at a step the game skipped for a non-finite value
(:func:`check_finite`). Only here does the loop read device values.

Example:
    >>> unique_names(["λ", "λ"])
    ['λ', 'λ#2']
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairgames.game import ConstrainedOptimizer, NonFiniteStepError
from fairgames.models import decision_threshold
from fairgames.rates import Batch

from ..data import predict_scores
from ..group_tables import batch_group_table, parity_gaps

if TYPE_CHECKING:
    from .engine import Engine


def log_entry(engine: Engine, last: Any) -> tuple[dict[str, Any], dict[str, bool]]:
    """The history entry of the engine's last step (syncs) on its last batch ``last`` (the
    features and :class:`Batch` fields, or a function making them), and which constraints are
    equalities (for their violations' tags). Call it under ``torch.no_grad()``."""
    copt = engine.copt
    rec = copt.last.to_host()
    terms = copt.terms
    names = copt.problem.constraint_names
    values = dict(zip(names, rec["constraints_true"], strict=True))
    equality = {n: c.sense == "==" for n, c in copt.problem.constraints.items()}
    violations = {n: (abs(v) if equality[n] else max(v, 0.0)) for n, v in values.items()}
    entry: dict[str, Any] = {
        "step": engine.step,
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
    _add_batch_values(engine, last, entry)
    entry["likely_infeasible"] = copt.likely_infeasible()
    # what plug-in players report of themselves (the DRO adversary's distance from p̂)
    scalars = {k: v for p in copt.players for k, v in p.log_scalars().items()}
    if scalars:
        entry["players"] = scalars
    if engine.extra_scalars is not None:
        entry["extra"] = dict(engine.extra_scalars(engine.model))
    return entry, equality


def _add_batch_values(engine: Engine, last: Any, entry: dict[str, Any]) -> None:
    """The surrogate bounds, per-group rates and parity gaps on the last training batch."""
    copt = engine.copt
    # Surrogate bounds on the last batch (the θ-player's view), in eval mode so that
    # logging draws no random numbers (dropout) and a resumed run logs the same.
    x, fields = last() if callable(last) else last
    scores = predict_scores(engine.model, x, chunk=max(1, len(x)))   # one chunk
    batch = Batch(scores=scores, **fields)
    leaf_values = copt.evaluator(batch, update=False)
    objective = copt.problem.objective
    entry["objective_surrogate"] = _bound(objective, leaf_values) if objective is not None \
        else None
    entry["constraints_surrogate"] = {
        n: _bound(c.expression, leaf_values) for n, c in copt.problem.constraints.items()}
    if engine.heldout is not None:
        # The game's record is on the held-out data; the gap to the training batch's true
        # values is what the two-dataset game is for, so it is logged beside it.
        entry["constraints_batch"] = {
            n: float(c.expression.evaluate(leaf_values))
            for n, c in copt.problem.constraints.items()}
    # unweighted (a balanced sampler's importance weights would weight the counts)
    entry["groups"] = batch_group_table(Batch(scores=scores, **{**fields, "weights": None}),
                                        engine.protected, decision_threshold(engine.model))
    if engine.thresholds:
        entry["parity"] = parity_gaps(scores, fields["groups"][engine.protected],
                                      fields["group_values"][engine.protected],
                                      engine.thresholds)


def check_finite(copt: ConstrainedOptimizer, step: int, last_checkpoint: Path | None,
                 saved_step: int | None) -> None:
    """Stop at a step the game skipped for a non-finite value (one sync, at log time),
    naming the step (``step``: the steps the engine has done) and the latest checkpoint."""
    try:
        copt.check()
    except NonFiniteStepError as e:
        # the game counts steps from 0, the engine the steps done: step k is the k+1-th
        if last_checkpoint is None:
            where = "no checkpoint was written (trainer.checkpoint_every)"
        else:
            where = (f"the latest checkpoint is {last_checkpoint} (step "
                     f"{saved_step}; the skipped steps left no trace in it)")
        raise NonFiniteStepError(
            f"training stopped at step {step}: step {e.step + 1} met non-finite "
            f"{', '.join(e.kinds)} and was skipped ({e.count} step(s) skipped since the "
            f"last log); {where}. Remedy: lower the learning rate, clip the gradients "
            "(optimizer.grad_clip), or look for NaN/inf in the model's inputs; then "
            "retrain or resume",
            step=e.step, kinds=e.kinds, count=e.count) from e


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


def tags(entry: Mapping[str, Any], equality: Mapping[str, bool]) -> dict[str, float | None]:
    """The TensorBoard scalars of a history entry (:mod:`~fairgames.train.loop.logger` lists
    the tags); non-finite values as ``None``."""
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
