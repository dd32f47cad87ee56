"""What paper 004's family adds to a run (imported by :mod:`fairgames.families`): the
``robust`` config group (:class:`~.robust.RobustConfig`) and its rules; the robust extension
(``robust=dro`` / ``soft_assignments``: the adversary joins the game, its robust values may
choose the solutions, and every run whose data holds the true groups reports ``results.json``'s
``robust`` block); the ideal algorithm as a method (``robust=soft_assignments_ideal``); and
``robust_lr``, the adversary's step, in ``trainer.tune_grid``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from fairgames.data import true_attribute
from fairgames.train.config.checks import Checks, register_validator
from fairgames.train.config.errors import ConfigError
from fairgames.train.context import RunContext, RunProblem
from fairgames.train.evaluation import SolutionEvaluator
from fairgames.train.method import (
    Extension,
    Trained,
    register_extension,
    register_group,
    register_method,
    register_tune_step,
)

from .ideal import IdealMethod
from .noise_model import missing_true_groups
from .robust import (
    RobustConfig,
    check_robust,
    robust_line,
    robust_log,
    robust_players,
    robust_report,
    robust_selector,
)
from .select import PlayedState, RobustSelector, played_steps
from .verdict import robust_verdict

NOISY = {"rule": "noisy", "samples": None, "seed": None}    # robust.selection when not chosen


class RobustExtension(Extension):
    """The ``robust`` group's part in every run (see the module docstring)."""

    group = "robust"

    def players(self, ctx: RunContext) -> list[Any]:
        cfg, attribute = self.settings(ctx), ctx.inputs.protected
        # a config error of its own, not the algorithm's "cannot play" (issue 55)
        if (cfg is not None and cfg.name == "soft_assignments"
                and true_attribute(attribute) not in ctx.splits.train.groups):
            raise ConfigError(missing_true_groups(attribute))
        return robust_players(cfg, ctx.splits, attribute)

    def log_scalars(self, ctx: RunContext, problem: RunProblem, evaluator: SolutionEvaluator
                    ) -> Callable[[torch.nn.Module], Mapping[str, float | None]] | None:
        return robust_log(self.settings(ctx), problem.problem, evaluator, ctx.splits,
                          ctx.inputs.protected, ctx.inputs.trainer.eval_chunk)

    def snapshot_state(self, ctx: RunContext, game: Any) -> torch.nn.Module | None:
        # robust.select=played: the adversary's p̃ at the model's snapshots
        cfg = self.settings(ctx)
        return PlayedState(game.player("dro")) if cfg is not None and cfg.select == "played" \
            else None

    def selector(self, ctx: RunContext, problem: RunProblem, trained: Trained
                 ) -> RobustSelector | None:
        engine = trained.engine
        played = played_steps(engine, engine.copt) if engine is not None else None
        return robust_selector(self.settings(ctx), problem.problem, ctx.splits,
                               ctx.inputs.protected, ctx.inputs.seed, played)

    def report(self, ctx: RunContext, problem: RunProblem, evaluator: SolutionEvaluator,
               recommended: torch.nn.Module, selector: Any) -> dict[str, Any] | None:
        block = robust_report(self.settings(ctx), problem.problem, evaluator, recommended,
                              ctx.splits, ctx.inputs.protected, ctx.inputs.trainer.eval_chunk)
        if block is not None:
            block["selection"] = (selector.record() if isinstance(selector, RobustSelector)
                                  else dict(NOISY))
        return block

    def verdict(self, results: Mapping[str, Any]) -> Mapping[str, Any] | None:
        # a robust run is judged on the robust constraints it played (issue 56)
        block = results.get(self.group)
        if block is None:
            return None
        return robust_verdict(block, results["verdict"]["constraints"],
                              steps=int(results["training"].get("steps") or 1))

    def lines(self, results: Mapping[str, Any]) -> list[str]:
        # noisy groups: true / noisy / robust per split
        return [robust_line(results["robust"])] if "robust" in results else []


def check_tune(c: Any, check: Checks) -> None:
    """``trainer.tune_grid.robust_lr`` sweeps an adversary's step: only a robust method has
    one."""
    if c.trainer.tune is None:
        return
    adversary = c.trainer.tune_grid.get("robust_lr")
    robust = c.get("robust")
    if adversary and list(adversary) != [1.0] and (robust is None or robust.name == "none"):
        check.bad("trainer.tune_grid.robust_lr", list(adversary), "robust=none has no "
                  "adversary step to sweep: choose robust=dro or robust=soft_assignments, or "
                  "leave robust_lr out of the grid")


register_group("robust", RobustConfig, check_robust)
register_extension(RobustExtension())
register_method(IdealMethod())
# the adversary's step (DRO's η_p̃, soft assignments' η_w; paper 004's Table 1 grid sweeps it
# beside η_θ and η_λ), not swept by default
register_tune_step("robust_lr", "robust.lr")
register_validator("trainer", check_tune)
