"""The solution a run recommends deploying: ``results.json``'s ``recommended``.

A run keeps three solutions for paper 000's protocols (final, best iterate, stochastic); the
stochastic one is by default the uniform mixture of the snapshots, which misses the
constraint where the game has not settled, and the best iterate is chosen on validation. The
constraint is asked on train, so ``trainer.recommend=auto`` (the default) chooses on train,
among the kept snapshots and the final model (the *candidates*), each evaluated exactly:

1. the LP mixture of at most m + 1 candidates (:func:`~fairgames.game.solutions.shrink_lp`),
   re-evaluated with true rates and, where a ratio of rates makes it infeasible, moved towards
   the best candidate (:func:`~fairgames.train.results.solutions.repair_lp_mixture`) — when it is
   feasible on train and its true objective is no worse than the best feasible candidate's
   (the LP mixes objective *values*: for a ratio objective such as 1 − F1 the mixture's true
   objective can be worse than its best member's, and then the member is the better output);
2. else the best candidate on train (:func:`~fairgames.game.solutions.best_iterate`: the
   feasible one with the lowest objective; when none is feasible, Cotter et al.'s rank rule).

The final model is a candidate because the snapshots need not include it (it is often the
best deterministic model when the game has settled). So is a helper model the run trained on
train before the game, the unconstrained model behind ``unconstrained_<metric>`` values
(paper 000's Table 3 bound ``error ≤ 1.1 × error(UncError)``): it meets a bound relative to
itself by construction, so the LP can mix it in where the game's own iterates miss the bound
(KLD under an error bound on Crime's 1,200 training rows). ``training.recommended.members``
names each member (``step 120``, ``step 500 (final)``, ``unconstrained model``); a helper's
``steps`` entry is ``null``. ``trainer.recommend=final`` /
``best_iterate`` / ``stochastic`` recommend that solution as the run chose it (the opt-out for
published protocols, with ``trainer.snapshot_offset=fixed``). :data:`REASONS` are the reason
strings ``results.json`` carries.

Example:
    >>> def exact(w):     # candidate 0 is better but infeasible, 1 feasible: mix them
    ...     g = float(w[0]) * 0.2 - float(w[1]) * 0.2
    ...     return 0.3 * float(w[0]) + 0.5 * float(w[1]), [g]
    >>> c = choose([0.3, 0.5], [[0.2], [-0.2]], exact)
    >>> c.solution, [round(v, 3) for v in c.weights.tolist()], c.reason
    ('lp_mixture', [0.5, 0.5], 'the LP mixture of 2 candidates is feasible on train')
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from fairgames.game.solutions import StochasticModel, best_iterate, model_state, shrink_lp

from ..config import TrainerConfig
from ..evaluation import SolutionEvaluator
from .solutions import (
    REPAIR_TOLERANCE,
    Candidates,
    Selector,
    candidate_values,
    exact_mixture,
    model_device,
    repair_lp_mixture,
)

SPLIT = "train"   # where the constraint is asked, so where the recommendation is chosen
# The reasons ``results.json`` gives, by case (``{...}`` filled in per run).
REASONS = {
    "mixture": "the LP mixture of {k} candidates is feasible on train",
    "repaired": "the LP mixture of {k} candidates, moved {t:g} of the way towards the best "
                "candidate, is feasible on train (the LP is inexact for a ratio)",
    "single": "the LP's choice is one candidate, feasible on train",
    "unconstrained": "no constraints: the candidate with the lowest objective on train",
    "lp_worse": "the best candidate feasible on train (its objective {f_best:.4g} beats the "
                "LP mixture's {f_mix:.4g} in true rates)",
    "none_feasible": "nothing is feasible on train: no mixture of the {n} candidates meets "
                     "the constraints (the LP's least largest violation over their hull is "
                     "{hull:.4g}; the least among single candidates {v:.4g}); the rank rule's "
                     "candidate (Cotter et al. 2019)",
    "alias": "trainer.recommend={name}: the {name} solution as the run chose it",
}


@dataclass
class Choice:
    """The recommendation among ``R`` candidates: ``weights`` [R] (float64; one-hot for a
    single candidate), ``solution`` (``"lp_mixture"`` or ``"iterate"``), the ``reason`` in
    words and how far the LP mixture was moved towards the best candidate (``None``: not)."""

    weights: torch.Tensor
    solution: str
    reason: str
    moved: float | None = None

    @property
    def support(self) -> list[int]:
        return [i for i, w in enumerate(self.weights.tolist()) if w > 0]


def choose(objectives: list[float], rows: list[list[float]],
           exact: Callable[[torch.Tensor], tuple[float, list[float]]]) -> Choice:
    """The ``auto`` rule (module docstring) over candidates with these true ``objectives`` and
    ``g ≤ 0`` ``rows`` on train; ``exact(w)`` evaluates the mixture ``w`` there."""
    best = best_iterate(objectives, rows)
    one_hot = torch.zeros(len(objectives), dtype=torch.float64)
    one_hot[best] = 1.0
    if not any(rows):
        return Choice(one_hot, "iterate", REASONS["unconstrained"])
    best_feasible = max(rows[best]) <= 0.0
    with warnings.catch_warnings():     # an infeasible LP is a case below, not a warning
        warnings.simplefilter("ignore", RuntimeWarning)
        # A margin inside the bound: the mixture is evaluated with float32 weights, and one the
        # LP puts on a boundary would read a few ulps above it (then the repair below moves
        # it, as it does where the LP is inexact for a ratio). Without room for the margin,
        # the LP at the bound itself.
        lp = shrink_lp(objectives, rows, tolerance=-REPAIR_TOLERANCE, return_result=True)
        if not lp.feasible:
            lp = shrink_lp(objectives, rows, return_result=True)
    weights, moved = repair_lp_mixture(torch.as_tensor(lp.weights, dtype=torch.float64), best,
                                       rows[best], exact, tolerance=0.0)
    f_mix, g_mix = exact(weights)
    k = sum(w > 0 for w in weights.tolist())
    if max(g_mix) <= 0.0 and (not best_feasible or f_mix <= objectives[best]):
        if k == 1:
            return Choice(weights, "iterate", REASONS["single"], moved)
        key = "mixture" if moved is None else "repaired"
        return Choice(weights, "lp_mixture", REASONS[key].format(k=k, t=moved or 0.0), moved)
    if best_feasible:    # then the repair made the mixture feasible: its objective lost
        return Choice(one_hot, "iterate", REASONS["lp_worse"].format(f_best=objectives[best],
                                                                     f_mix=f_mix))
    least = min(max(r) for r in rows)
    return Choice(one_hot, "iterate", REASONS["none_feasible"].format(
        n=len(rows), hull=lp.max_violation, v=least))


HELPER_STEP = -1   # the step a helper model stands at in the candidates' mixture


def with_final(cands: Candidates) -> tuple[StochasticModel, dict[str, torch.Tensor], list[str]]:
    """The snapshots, the final model (unless the last snapshot is of its step) and the
    helper models as one mixture, their scores per split and a name per member."""
    mixture, steps = cands.mixture, list(cands.mixture.steps or [])
    names = [f"step {s}" for s in steps]
    extra = [] if steps and steps[-1] == cands.step else [("final", cands.model, cands.final)]
    if extra:
        steps.append(cands.step)
        names.append(f"step {cands.step} (final)")
    for name, module in cands.helpers.items():
        extra.append((name, module, cands.helper_scores[name]))
        steps.append(HELPER_STEP)
        names.append(name)
    if not extra:
        return mixture, cands.scores, names
    states = [dict(model_state(m)) for _, m, _ in extra]
    members = {n: torch.cat([t, *(st[n].detach()[None].to(t) for st in states)])
               for n, t in mixture.members.items()}
    model = StochasticModel(mixture.skeleton, members, steps=steps,
                            vectorize=mixture.vectorize)
    scores = {n: torch.cat([s, *(e[2][n][None].to(s) for e in extra)])
              for n, s in cands.scores.items()}
    return model, scores, names


def recommend(cands: Candidates, evaluator: SolutionEvaluator, trainer: TrainerConfig,
              solved: tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]],
              selector: Selector | None = None
              ) -> tuple[dict[str, Any], dict[str, Any], torch.nn.Module]:
    """The recommended solution: its metrics on every split, its ``training.recommended``
    record and the model (a module, or a :class:`StochasticModel` for a mixture).
    ``solved`` is :func:`~fairgames.train.results.solutions.evaluate_solutions`'s output; with a
    ``selector`` (an extension's, e.g. ``robust.select``) the constraint rows on train are its
    values."""
    if trainer.recommend != "auto":
        # the split the solutions were chosen on (train when the selection split could
        # not measure a constraint)
        return alias(trainer.recommend, solved[1]["best_iterate"]["split"], *solved)
    model, scores, names = with_final(cands)
    ds, base = cands.splits[SPLIT], cands.base(SPLIT)
    objectives, rows = candidate_values(evaluator, ds, scores[SPLIT], base)
    exact = exact_mixture(evaluator, ds, scores[SPLIT], base)
    steps = list(model.steps or [])
    if selector is not None:
        rows = selector.rows(evaluator, ds, scores[SPLIT], rows, steps)
        exact = selector.exact(evaluator, ds, scores[SPLIT], exact, steps)
    c = choose(objectives, rows, exact)
    kept = c.support
    record = {"solution": c.solution, "rule": "auto", "reason": c.reason, "split": SPLIT,
              "steps": [steps[i] if steps[i] != HELPER_STEP else None for i in kept],
              "members": [names[i] for i in kept],
              "weights": [float(c.weights[i]) for i in kept],
              "moved_towards_best_iterate": c.moved}
    metrics: dict[str, Any] = {}
    q = c.weights[kept].to(model_device(cands.model), torch.float32)
    for name, split_ds in cands.splits.items():
        s = scores[name][kept]
        metrics[name] = (evaluator.evaluate(split_ds, s[0], baseline_scores=cands.base(name))
                         if len(kept) == 1 else
                         evaluator.evaluate(split_ds, s, mixture_weights=q,
                                            baseline_scores=cands.base(name)))
    if len(kept) > 1:
        solution: torch.nn.Module = model.subset(c.weights)
    elif names[kept[0]].endswith("(final)") or (kept[0] == len(cands.mixture) - 1
                                                 and steps[kept[0]] == cands.step):
        solution = cands.model           # the final model (or the snapshot of its step)
    elif steps[kept[0]] == HELPER_STEP:
        solution = cands.helpers[names[kept[0]]]
    else:
        solution = model.member(kept[0])
    return metrics, record, solution


def alias(name: str, split: str, results: Mapping[str, Any], choice: Mapping[str, Any],
          solutions: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """``trainer.recommend=<name>``: that solution, its metrics and its record."""
    if name == "final":
        steps, weights, moved, where = [], [1.0], None, None
    elif name == "best_iterate":
        steps, weights, moved = [choice[name]["step"]], [1.0], None
        where = choice[name]["split"]
    else:
        steps, weights = list(choice[name]["steps"]), list(choice[name]["weights"])
        moved, where = choice[name]["moved_towards_best_iterate"], split
    record = {"solution": name, "rule": name, "reason": REASONS["alias"].format(name=name),
              "split": where, "steps": steps, "weights": weights,
              "moved_towards_best_iterate": moved}
    return copy.deepcopy(dict(results[name])), record, solutions[name]
