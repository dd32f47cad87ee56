"""The three solutions of a run: the final model, the best iterate and the stochastic model.

(The fourth, the one to deploy, is chosen among the same candidates by
:mod:`fairgames.train.results.recommend`.)

The snapshots kept during training are the candidates. Each is evaluated with true rates on
the selection split; the best iterate is :func:`fairgames.game.solutions.best_iterate`'s
choice (the feasible candidate with the lowest objective, else Cotter et al.'s rank
heuristic) and the stochastic model is their uniform mixture (paper 000's output) or the LP
mixture of at most m + 1 of them (:func:`~fairgames.game.solutions.shrink_lp`). All three are
then evaluated on every split.

The LP mixes the candidates' metric *values*, which is exact for rates but not for ratios of
rates (an F-measure of a mixture is a ratio of mixed counts, not the mix of the F-measures).
So the LP mixture is evaluated exactly on the selection split, and where it violates a
constraint that the best iterate meets, :func:`repair_lp_mixture` moves it towards the best
iterate until it is feasible (paper 000's Table 4 on Law: an LP mixture 0.07 above the
F-measure-parity bound on training, beside feasible snapshots).

Example:
    >>> constraint_rows({"constraints": {"a": {"value": 0.1}, "b": {"value": -0.2}}},
    ...                 ["<=", "=="])
    [0.1, -0.2, 0.2]
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from fairgames.data import DatasetSplits, TabularDataset
from fairgames.game.solutions import StochasticModel, best_iterate, shrink_lp

from ..config import TrainerConfig
from ..data import predict_scores
from ..evaluation import SolutionEvaluator
from ..loop.engine import Engine
from ..subsets import empty_subsets

ExactMixture = Callable[[torch.Tensor], tuple[float, list[float]]]


class Selector(Protocol):
    """Constraint values that choose the best iterate and the recommended solution in place
    of the problem's own (an extension's, :meth:`fairgames.train.method.Extension.selector`;
    e.g. paper 004's robust values, ``robust.select``).

    ``rule`` names it (``results.json``'s ``best_iterate.constraints``); ``rows`` replaces the
    candidates' (``scores`` ``[R, N]``, training ``steps`` ``[R]``) ``g ≤ 0`` rows on ``ds``;
    ``exact`` wraps a mixture's exact ``w ↦ (objective, rows)`` the same way.
    """

    rule: str

    def rows(self, evaluator: Any, ds: TabularDataset, scores: torch.Tensor,
             rows: Sequence[Sequence[float]], steps: Sequence[int] = ()
             ) -> list[list[float]]: ...

    def exact(self, evaluator: Any, ds: TabularDataset, scores: torch.Tensor,
              exact: ExactMixture, steps: Sequence[int] = ()) -> ExactMixture: ...


REPAIR_STEPS = 20   # the segment from the LP mixture to the best iterate, in 1/20ths
# The LP mixture is evaluated with float32 mixture weights: a mixture the LP put exactly on a
# linear constraint's boundary may read a few ulps above it, which is not a violation.
REPAIR_TOLERANCE = 1e-6


def repair_lp_mixture(weights: torch.Tensor, best: int, best_rows: list[float],
                      exact: Callable[[torch.Tensor], tuple[float, list[float]]],
                      tolerance: float = REPAIR_TOLERANCE) -> tuple[torch.Tensor, float | None]:
    """The LP mixture, or the best feasible point on its segment to the best iterate.

    ``exact(w)`` gives the objective and ``g ≤ 0`` rows of the mixture ``w`` with true rates
    on the selection split. When the LP mixture is feasible there (up to ``tolerance``), or
    the best iterate is not,
    ``weights`` is returned unchanged; otherwise the mixtures ``(1 − t)·w + t·e_best`` for
    ``t = 1/20, …, 1`` are evaluated exactly and the best by the feasible-first rule is
    returned (``t = 1``, the best iterate itself, is feasible, so the result is too), with
    its ``t``. At most m + 2 candidates keep a weight.

    Example:
        >>> def exact(w):     # candidate 0 is better, the constraint holds only near 1
        ...     return -float(w[0]), [float(w[0]) ** 2 - 0.25]
        >>> w, t = repair_lp_mixture(torch.tensor([1.0, 0.0], dtype=torch.float64), 1,
        ...                          [-0.25], exact)
        >>> [round(float(v), 2) for v in w], t
        ([0.5, 0.5], 0.5)
    """
    _, rows = exact(weights)
    if (max(rows, default=-math.inf) <= tolerance
            or max(best_rows, default=-math.inf) > 0.0):
        return weights, None
    point = torch.zeros_like(weights)
    point[best] = 1.0
    ts = [k / REPAIR_STEPS for k in range(1, REPAIR_STEPS + 1)]
    mixtures = [(1.0 - t) * weights + t * point for t in ts]
    values = [exact(w) for w in mixtures]
    pick = best_iterate([v[0] for v in values], [v[1] for v in values], tolerance=tolerance)
    return mixtures[pick], ts[pick]


def constraint_rows(metrics: Mapping[str, Any], senses: list[str]) -> list[float]:
    """``g ≤ 0`` rows of a solution's constraints (an equality gives ``g`` and ``−g``)."""
    rows: list[float] = []
    for c, sense in zip(metrics["constraints"].values(), senses, strict=True):
        v = c["value"] if c["value"] is not None and not math.isnan(c["value"]) else math.inf
        rows += [v] if sense == "<=" else [v, -v]
    return rows


@dataclass
class Candidates:
    """The kept snapshots of a run and the final model, scored once on every split.

    ``mixture`` holds the snapshots (uniform weights, their training ``steps``); ``scores``
    ``{split: [R, N]}`` are the snapshots' scores and ``final`` ``{split: [N]}`` the final
    model's; ``splits`` the data and ``baselines`` a churn baseline's scores (or ``None``).
    ``helpers`` are other models of the same architecture the run trained on train before
    the game (the unconstrained model of ``unconstrained_<metric>`` values), by name, and
    ``helper_scores`` ``{name: {split: [N]}}`` their scores: the recommendation may use them.
    """

    model: torch.nn.Module
    step: int
    mixture: StochasticModel
    scores: dict[str, torch.Tensor]
    final: dict[str, torch.Tensor]
    splits: dict[str, TabularDataset]
    baselines: Mapping[str, torch.Tensor] | None
    helpers: dict[str, torch.nn.Module] = field(default_factory=dict)
    helper_scores: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)

    def base(self, split: str) -> torch.Tensor | None:
        return self.baselines[split] if self.baselines else None


def score_candidates(engine: Engine, splits: DatasetSplits,
                     baselines: Mapping[str, torch.Tensor] | None, trainer: TrainerConfig,
                     helpers: Mapping[str, torch.nn.Module] | None = None) -> Candidates:
    """Every kept snapshot's, the final model's and the ``helpers``' scores on every split."""
    model = engine.model
    recorder = engine.snapshots
    if len(recorder) == 0:      # fewer steps than snapshot_every: the final model is the one
        recorder.offer()
        if engine.extra_snapshots is not None:
            engine.extra_snapshots.offer()
    mixture = recorder.to_stochastic_model(template=model)
    chunk = trainer.eval_chunk
    scores = {name: predict_scores(mixture, ds.features, chunk) for name, ds in splits.items()}
    final = {name: predict_scores(model, ds.features, chunk) for name, ds in splits.items()}
    helpers = dict(helpers or {})
    helper_scores = {h: {name: predict_scores(m, ds.features, chunk)
                         for name, ds in splits.items()} for h, m in helpers.items()}
    return Candidates(model, engine.step, mixture, scores, final, dict(splits.items()),
                      baselines, helpers, helper_scores)


def candidate_values(evaluator: SolutionEvaluator, ds: TabularDataset, scores: torch.Tensor,
                     baseline: torch.Tensor | None) -> tuple[list[float], list[list[float]]]:
    """Objective (``inf`` where undefined) and ``g ≤ 0`` rows of each row of ``scores``."""
    senses = [c.sense for c in evaluator.constraints]
    objectives, rows = [], []
    for m in evaluator.statements_each(ds, scores, baseline_scores=baseline):
        objectives.append(m["objective"] if m["objective"] is not None else math.inf)
        rows.append(constraint_rows(m, senses))
    return objectives, rows


def exact_mixture(evaluator: SolutionEvaluator, ds: TabularDataset, scores: torch.Tensor,
                  baseline: torch.Tensor | None, support: list[int] | None = None
                  ) -> Callable[[torch.Tensor], tuple[float, list[float]]]:
    """``w ↦ (objective, g ≤ 0 rows)`` of the mixture ``w`` ([R], zero off ``support``) with
    true rates on ``ds``; only the ``support`` rows of ``scores`` are evaluated (``None``:
    each ``w``'s own non-zeros)."""
    senses = [c.sense for c in evaluator.constraints]
    fixed = scores[support] if support is not None else None

    def exact(w: torch.Tensor) -> tuple[float, list[float]]:
        rows = support if support is not None else [i for i, v in enumerate(w.tolist()) if v]
        s = fixed if fixed is not None else scores[rows]
        q = w[rows].to(s.device, torch.float32)
        m = evaluator.statements(ds, s, baseline_scores=baseline, mixture_weights=q)
        f = m["objective"] if m["objective"] is not None else math.inf
        return f, constraint_rows(m, senses)
    return exact


def selection_split(evaluator: SolutionEvaluator, splits: Mapping[str, TabularDataset],
                    split: str) -> str:
    """``split`` (``trainer.selection_split``), or ``"train"`` with a warning when the
    objective or a constraint is undefined there (a subset with no row on that split, e.g. a
    group absent from validation): the candidates cannot be compared on it.

    Example:
        >>> from fairgames.data import make_synthetic
        >>> from fairgames.rates import error_rate, group, true_positive_rate
        >>> splits = dict(make_synthetic(n=300, seed=0).items())
        >>> v = splits["validation"]
        >>> splits["validation"] = v.subset(torch.nonzero(v.groups["group"] == 0).flatten())
        >>> ev = SolutionEvaluator(error_rate(), [(true_positive_rate(group("group", "1"))
        ...                                        >= 0.5).named("tpr1")], "group")
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     selection_split(ev, splits, "validation"), selection_split(ev, splits, "test")
        ('train', 'test')
        >>> str(caught[0].message).split(":")[0]
        "trainer.selection_split='validation'"
    """
    if split == "train":
        return split
    metrics: dict[str, Any] = {"the objective": evaluator.objective,
                               **{f"constraint {c.name!r}": c for c in evaluator.constraints}}
    undefined = empty_subsets(metrics, splits[split], evaluator.chunk)
    if not undefined:
        return split
    warnings.warn(f"trainer.selection_split={split!r}: {', '.join(undefined)} undefined on the "
                  f"{split} split (a subset with no row there); the best iterate and the "
                  "stochastic model are chosen on train instead", stacklevel=2)
    return "train"


def evaluate_solutions(cands: Candidates, evaluator: SolutionEvaluator, trainer: TrainerConfig,
                       selector: Selector | None = None
                       ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Evaluate the final model, the best iterate and the stochastic model on every split.
    With a ``selector`` (an extension's, e.g. ``robust.select``) the candidates' constraint
    rows on the selection split are its values (paper 004's best iterate by (3) / (7))."""
    mixture, scores, final, base = cands.mixture, cands.scores, cands.final, cands.base
    steps = list(mixture.steps or [])
    # Candidates are compared on the selection split (paper 000 [code]: validation).
    split = selection_split(evaluator, cands.splits, trainer.selection_split)
    ds = cands.splits[split]
    objectives, rows = candidate_values(evaluator, ds, scores[split], base(split))
    if selector is not None:
        rows = selector.rows(evaluator, ds, scores[split], rows, steps)
    best = best_iterate(objectives, rows)
    repaired = None
    if trainer.stochastic == "shrunk" and rows and rows[0]:
        weights = torch.as_tensor(shrink_lp(objectives, rows), dtype=torch.float64)
        # Every mixture the repair looks at lives on the LP's support and the best iterate
        # (≤ m + 2 snapshots): evaluate those rows only, not all R.
        support = sorted({i for i, w in enumerate(weights.tolist()) if w > 0} | {best})
        exact = exact_mixture(evaluator, ds, scores[split], base(split), support)
        if selector is not None:
            exact = selector.exact(evaluator, ds, scores[split], exact, steps)
        weights, repaired = repair_lp_mixture(weights, best, rows[best], exact)
    else:
        weights = mixture.weights.detach().cpu()
    stochastic = mixture if trainer.stochastic == "uniform" else mixture.subset(weights)
    q = weights.to(device=model_device(cands.model), dtype=torch.float32)
    results: dict[str, Any] = {"final": {}, "best_iterate": {}, "stochastic": {}}
    for name, split_ds in cands.splits.items():
        results["final"][name] = evaluator.evaluate(split_ds, final[name],
                                                    baseline_scores=base(name))
        results["best_iterate"][name] = evaluator.evaluate(split_ds, scores[name][best],
                                                           baseline_scores=base(name))
        results["stochastic"][name] = evaluator.evaluate(split_ds, scores[name],
                                                         mixture_weights=q,
                                                         baseline_scores=base(name))
    kept = [i for i, w in enumerate(weights.tolist()) if w > 0]
    choice = {"best_iterate": {"step": steps[best], "split": split,
                               **({} if selector is None else {"constraints": selector.rule})},
              "stochastic": {"kind": trainer.stochastic, "steps": [steps[i] for i in kept],
                             "weights": [float(weights[i]) for i in kept],
                             "moved_towards_best_iterate": repaired}}
    solutions = {"final": cands.model, "best_iterate": mixture.member(best),
                 "stochastic": stochastic}
    return results, choice, solutions


def model_device(model: torch.nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")
