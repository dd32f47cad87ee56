"""``algorithm=reduction``: paper 003's reduction played from a run config.

A problem that names its paper-003 game (``reduction: sp`` in ``sp_regression``, ``bgl`` in
``bounded_group_loss``) is handed to :func:`fairgames.fair_regression.fair_regression` on the
training split: exponentiated gradient on λ (``algorithm.radius`` = B, ``multiplier_lr`` =
η) against the ``algorithm.best_response`` oracle, stopped by the duality gap
``algorithm.gap`` (ν, read every ``trainer.log_every`` iterations) or at ``trainer.steps``
iterations. What comes back is turned into the run's usual candidates
(:class:`~fairgames.train.results.solutions.Candidates`): the distinct iterates, each wrapped in
:class:`~fairgames.models.GridRounded` (the rounded predictor the guarantees are about),
weighted by their share of the iterations — so the ``stochastic`` solution IS the
reduction's Q̂, ``final`` is the last iterate h_T, and the best iterate and the recommended
solution are chosen among the iterates as for any run.

Example:
    >>> reduction_settings({"best_response": "lr", "gap": 0.02}, game="sp", tolerance=0.05,
    ...                    label_kind="binary", grid_size=40, iterations=None,
    ...                    check_every=25, seed=0).oracle
    'lr'
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from fairgames.data import DatasetSplits, TabularDataset
from fairgames.game.players import BestResponsePlayer, ExponentiatedGradient
from fairgames.game.solutions import StochasticModel
from fairgames.models import GridRounded
from fairgames.problems import ProblemSpec
from fairgames.problems.spec import TARGET_LOSSES
from fairgames.rates import threshold_grid
from fairgames.train.config import ConfigError
from fairgames.train.config.checks import Checks
from fairgames.train.context import Helpers, RunContext, RunProblem
from fairgames.train.data import predict_scores
from fairgames.train.files import save_figure
from fairgames.train.loop.logger import RunLogger
from fairgames.train.method import Method, Trained, training_record, whole_training_split
from fairgames.train.results.solutions import Candidates

from . import ReductionConfig, ReductionResult, fair_regression
from .reduction import CONFIG_KEYS

DEFAULT_BOUND = ReductionConfig.bound          # B
# η. The paper's ν/(8B) (SP) makes Theorem 4's iteration bound hold but moves λ ~1 000x
# slower than needed: on Crime, η = 2 at B = 10 reaches ν = 0.01 in ~2 700 iterations. A larger
# B needs its own η (BGL on Crime at B = 200: η = 2 does not reach ν = 0.02 in 1 000
# iterations, η = 20 does in 350): set algorithm.multiplier_lr with algorithm.radius.
DEFAULT_STEP_SIZE = 2.0
DEFAULT_ITERATIONS = 2000      # trainer.steps: null


def reduction_settings(algorithm: Mapping[str, Any], *, game: str, tolerance: float,
                       label_kind: str, grid_size: int, iterations: int | None,
                       check_every: int, seed: int) -> ReductionConfig:
    """The :class:`ReductionConfig` of a run: the algorithm group's keys (``best_response``,
    ``gap``, ``radius``, ``multiplier_lr``, ``theta_steps``; null: the defaults above), the
    problem's game, tolerance and grid, the target's loss (``target_loss``: squared for a
    real target, bounded logistic for a binary one) and the trainer's iteration budget."""
    radius, lr = algorithm.get("radius"), algorithm.get("multiplier_lr")
    bound = DEFAULT_BOUND if radius is None else float(radius)
    return ReductionConfig(
        constraint=game, tolerance=tolerance, loss=TARGET_LOSSES[label_kind],
        oracle=str(algorithm.get("best_response", "ls")),
        bound=bound,
        gap=float(algorithm.get("gap", ReductionConfig.gap)), grid_size=grid_size,
        max_iterations=DEFAULT_ITERATIONS if iterations is None else int(iterations),
        check_every=check_every,
        step_size=DEFAULT_STEP_SIZE if lr is None else float(lr),
        inner_steps=int(algorithm.get("theta_steps", 20)), seed=seed)


def play_reduction(model_factory: Any, train: TabularDataset, protected: str,
                   config: ReductionConfig) -> ReductionResult:
    """Algorithm 1 / 2 on the training split's features, target and ``protected`` codes."""
    return fair_regression(model_factory, train.features, train.labels,
                           train.groups[protected], config)


def rounded_mixture(result: ReductionResult, grid_size: int) -> StochasticModel:
    """Q̂ as a mixture of :class:`GridRounded` iterates (steps: each one's first iteration)."""
    raw = result.model
    members = [GridRounded(raw.member(i), grid_size) for i in range(len(raw))]
    return StochasticModel.from_modules(members, raw.weights, steps=result.first_iterations)


def reduction_candidates(result: ReductionResult, splits: DatasetSplits, grid_size: int,
                         chunk: int) -> Candidates:
    """The run's candidates: every distinct rounded iterate scored on every split, Q̂'s
    weights, and the last iterate as the final model."""
    mixture = rounded_mixture(result, grid_size)
    final = mixture.member(result.last_member)
    scores = {name: predict_scores(mixture, ds.features, chunk) for name, ds in splits.items()}
    final_scores = {name: s[result.last_member] for name, s in scores.items()}
    return Candidates(final, result.iterations, mixture, scores, final_scores,
                      dict(splits.items()), None)


def row_names(game: str, group_names: Sequence[str], grid: torch.Tensor) -> list[str]:
    """The multipliers' names, as ``sp_regression`` / ``bounded_group_loss`` name their
    constraints: SP's ``sp_high[a,z]`` (λ⁺ of γ̂_{a,z} ≤ ε̂) then ``sp_low[a,z]`` (λ⁻ of
    −γ̂_{a,z} ≤ ε̂); BGL's ``bgl[a]``.

    Example:
        >>> row_names("sp", ["a", "b"], torch.tensor([0.5, 1.0]))[:3]
        ['sp_high[a,0.5]', 'sp_high[a,1]', 'sp_high[b,0.5]']
        >>> row_names("sp", ["a", "b"], torch.tensor([0.5, 1.0]))[4]
        'sp_low[a,0.5]'
    """
    if game == "bgl":
        return [f"bgl[{a}]" for a in group_names]
    return [f"sp_{side}[{a},{float(z):g}]" for side in ("high", "low") for a in group_names
            for z in grid]


def reduction_record(result: ReductionResult, config: ReductionConfig) -> dict[str, Any]:
    """``results.json``'s ``training.reduction``: the settings, the outcome and Theorem 4's
    certificate (each bound with whether it held), the oracle calls and their time."""
    cert = result.certificate
    record: dict[str, Any] = {
        "game": config.constraint, "best_response": config.oracle
        if isinstance(config.oracle, str) else "custom", "loss": config.loss,
        "bound": config.bound, "gap_target": config.gap, "step_size": config.step_size,
        "grid_size": config.grid_size, "max_iterations": config.max_iterations,
        "check_every": config.check_every, "outcome": result.outcome,
        "iterations": result.iterations, "members": len(result.model),
        "certificate": {
            "gap": cert.gap, "objective": cert.objective, "dual_bound": cert.dual_bound,
            "objective_ok": cert.objective_ok, "max_violation": cert.max_violation,
            "violation_bound": cert.violation_bound, "violation_ok": cert.violation_ok,
            "iteration_bound": cert.iteration_bound,
            "within_iteration_bound": cert.within_iteration_bound,
            # "found": ν̲ and the dual bound are exact over the hypotheses the run found (the
            # lr heuristic); "oracle": read from the oracle's response alone
            "scope": cert.scope},
        "oracle_calls": result.oracle_calls,
        "seconds_per_call": result.seconds_per_call,
    }
    if result.evidence:
        record["evidence"] = {k: (v.tolist() if isinstance(v, torch.Tensor) else v)
                              for k, v in result.evidence.items()}
    return record


def outcome_line(record: Mapping[str, Any]) -> str:
    """One plain sentence on how the reduction ended (the CLI prints it under its summary).

    Example:
        >>> outcome_line({"outcome": "converged", "iterations": 9, "gap_target": 0.01,
        ...               "certificate": {"gap": 0.005, "max_violation": 0.02,
        ...                               "violation_bound": 0.1}}).split("; ")[1][:48]
        'the mixture exceeds its constraints by 0.02 on t'
        >>> outcome_line({"outcome": "max_iterations", "iterations": 10, "gap_target": 0.01,
        ...               "certificate": {"gap": 0.5}})
        'reduction NOT converged: stopped at the iteration cap (10) with duality gap 0.5 > 0.01'
    """
    cert, n = record["certificate"], record["iterations"]
    if record["outcome"] == "converged":
        line = (f"reduction converged in {n} iterations: duality gap {cert['gap']:.3g} <= "
                f"{record['gap_target']:g}")
        if cert.get("scope") == "found":
            line += " (certified against the mixtures of the hypotheses found)"
        if cert["max_violation"] > 0:   # within Theorem 4's slack, yet above the tolerance
            line += (f"; the mixture exceeds its constraints by {cert['max_violation']:.3g} "
                     f"on train (the certificate allows {cert['violation_bound']:.3g}: raise "
                     "algorithm.radius, B, to tighten it)")
        return line
    if record["outcome"] == "infeasible":
        return (f"reduction found the problem INFEASIBLE after {n} iterations: the mixture "
                f"exceeds its constraints by {cert['max_violation']:.3g} > the certificate's "
                f"{cert['violation_bound']:.3g} at duality gap {cert['gap']:.3g} (lower the "
                "demand: a larger tolerance; or a richer model class)")
    return (f"reduction NOT converged: stopped at the iteration cap ({n}) with duality gap "
            f"{cert['gap']:.3g} > {record['gap_target']:g}")


def log_reduction(logger: RunLogger, result: ReductionResult, names: Sequence[str],
                  every: int, game: str) -> None:
    """TensorBoard: per ``every`` iterations (and the last), the duality gap and its two
    halves, the mixture's loss and worst constraint value, and each λ̂ (``multiplier/``)."""
    hist = result.history
    worst_tag = "parity/worst_gap" if game == "sp" else "reduction/worst_group_loss"
    last = len(hist.loss)
    for t in [*range(every, last + 1, every), *([last] if last % every else [])]:
        i = t - 1
        values: dict[str, float | None] = {
            "reduction/gap": _finite(hist.gap[i]), "reduction/nu_over": hist.nu_over[i],
            "reduction/nu_under": _finite(hist.nu_under[i]), "reduction/loss": hist.loss[i],
            worst_tag: hist.worst[i]}
        values.update({f"multiplier/{n}": float(v)
                       for n, v in zip(names, hist.lambda_hat[i].tolist(), strict=True)})
        logger.scalars(t, values)


def plot_reduction(result: ReductionResult, path: Path, game: str) -> None:
    """The duality gap (log scale) and the mixture's loss and worst constraint value per
    iteration (matplotlib Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hist = result.history
    t = list(range(1, len(hist.loss) + 1))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4), constrained_layout=True)
    axes[0].semilogy(t, [max(v, 1e-12) for v in hist.nu_over], label="ν̄", alpha=0.6)
    checked = [(i + 1, g) for i, g in enumerate(hist.gap) if g == g and g > 0]
    if checked:
        axes[0].semilogy(*zip(*checked, strict=True), "o-", label="gap max(ν̄, ν̲)")
    axes[0].axhline(result.certificate.gap_target, color="k", ls="--", label="ν")
    axes[0].set_title("duality gap")
    axes[1].plot(t, hist.loss)
    axes[1].set_title("loss of Q̂")
    axes[2].plot(t, hist.worst)
    axes[2].set_title("worst |γ̂| of Q̂" if game == "sp" else "worst group loss of Q̂")
    for ax in axes:
        ax.set_xlabel("iteration")
    axes[0].legend(fontsize="small")
    try:
        save_figure(fig, path, dpi=100)      # whole or not at all; a full disk: OutputError
    finally:
        plt.close(fig)


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


# --------------------------------------------------------------------------- the method
# Trainer keys of a minibatch game the reduction (full batch, not checkpointed) cannot honour,
# with the value it needs.
TRAINER = {"epochs": None, "batch_size": None, "balanced_batches": False,
           "constraint_split": "train", "resume": False, "stop_after": None, "tune": None,
           "compile": False}


class ReductionMethod(Method):
    """``algorithm=reduction``: paper 003's reduction in place of the game — the same data,
    problem, evaluation and outputs, its iterates as the candidates. It plays exponentiated
    gradient on λ (``radius`` = B, ``multiplier_lr`` = η) against a best response
    (``theta_steps``: L-BFGS iterations where there is no closed form) and reads its own
    keys ``best_response`` and ``gap``; every other player key stays at its default."""

    name = "reduction"
    config_keys = CONFIG_KEYS
    players = {"theta": BestResponsePlayer, "multipliers": ExponentiatedGradient}
    surrogates = False      # its best responses fit the exact Lagrangian
    raw_scores = True       # its iterates are raw scores, deployed rounded to the grid

    def train(self, ctx: RunContext, problem: RunProblem, helpers: Helpers) -> Trained:
        inputs, trainer, train = ctx.inputs, ctx.inputs.trainer, ctx.splits.train
        spec = _reduction_spec(inputs.spec)
        config = reduction_settings(inputs.algorithm.to_mapping(), game=spec.reduction,
                                    tolerance=float(spec.tolerance or 0.0),
                                    label_kind=train.label_kind, grid_size=spec.grid_size,
                                    iterations=trainer.steps, check_every=trainer.log_every,
                                    seed=inputs.seed)
        try:
            result = play_reduction(inputs.model.factory, train, inputs.protected, config)
        except ValueError as e:      # the sample's checks: targets outside [0, 1], NaN features
            raise ConfigError(f"algorithm=reduction: {e}") from e
        ctx.extras["reduction"] = result
        names = row_names(spec.reduction, train.group_names[inputs.protected],
                          threshold_grid(spec.grid_size))
        candidates = reduction_candidates(result, ctx.splits, spec.grid_size, trainer.eval_chunk)

        def record(choice: Mapping[str, Any]) -> dict[str, Any]:
            return training_record(
                steps=result.iterations, preset=self.name,
                multipliers=dict(zip(names, result.lambda_hat.tolist(), strict=True)),
                slacks={}, likely_infeasible=result.outcome == "infeasible",
                seconds=time.perf_counter() - ctx.started, snapshots=result.first_iterations,
                choice=choice,
                constraint_data=whole_training_split(len(train)),
                problem={"constraints": list(problem.problem.constraint_names),
                         "multiplier_rows": names, "slacks": []},
                own={"reduction": reduction_record(result, config)})

        def write(run_dir: Path, results: Mapping[str, Any], logger: RunLogger) -> None:
            log_reduction(logger, result, names, trainer.log_every, spec.reduction)
            if trainer.plots:
                plot_reduction(result, run_dir / "dynamics.png", spec.reduction)

        return Trained(candidates, candidates.model, record, write=write,
                       metadata={"rounded_to_grid": spec.grid_size}, steps=result.iterations)

    def lines(self, results: Mapping[str, Any]) -> list[str]:
        record = results["training"].get("reduction")
        return [outcome_line(record)] if record is not None else []


def _reduction_spec(spec: Any) -> ProblemSpec:
    """The problem, which must name its paper-003 game (``reduction: sp | bgl``)."""
    if not isinstance(spec, ProblemSpec) or spec.reduction is None:
        name = spec.name if isinstance(spec, ProblemSpec) else "custom"
        raise ConfigError(f"algorithm=reduction plays paper 003's problems, those that name "
                          f"their game (reduction: sp or bgl: problem=sp_regression, "
                          f"problem=bounded_group_loss); problem={name} names none: pick one "
                          "of those or another algorithm")
    return spec


def check_reduction(c: Any, check: Checks) -> None:
    """What ``algorithm=reduction`` cannot honour: another λ strategy, a surrogate (its
    multipliers and its best responses both see the true rates), a minibatch or resumable
    trainer, torchrun (its oracles fit in one process)."""
    a, t = c.algorithm, c.trainer
    if a.name != ReductionMethod.name:
        return
    if a.multipliers not in (None, ExponentiatedGradient.strategy):
        check.bad("algorithm.multipliers", a.multipliers, "algorithm=reduction plays "
                  f"{ExponentiatedGradient.strategy} on λ (paper 003's Algorithms 1 and 2): "
                  "leave it null")
    for name, default in (("surrogate", "auto"), ("objective_surrogate", None),
                          ("temperature", None)):
        if a.get(name) != default and not (name == "objective_surrogate"
                                           and a.get(name) == "none"):
            check.bad(f"algorithm.{name}", a.get(name), "algorithm=reduction's best responses "
                      "fit the exact Lagrangian (no surrogate): leave it at "
                      f"{'null' if default is None else default}")
    for name, needed in TRAINER.items():
        if t.get(name) != needed:
            check.bad(f"trainer.{name}", t.get(name), "algorithm=reduction plays full-batch "
                      "best responses in one uninterrupted run: leave it at "
                      f"{'null' if needed is None else needed}")
    if t.get("distributed"):
        check.bad("trainer.distributed", True, "algorithm=reduction fits its oracles in one "
                  "process: train it without torchrun")
