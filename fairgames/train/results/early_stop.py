"""A certified early stop (``trainer.early_stop``): end the game at a log interval once the
solution the run would recommend has settled.

At every log interval (where the loop may read device values; the game step itself is
untouched) the check builds the recommendation the run would make if it stopped there:
:func:`~fairgames.train.results.recommend.choose` (the ``auto`` rule) over the snapshots kept so
far, the current model and the helper models, each evaluated exactly on the training split. The
run stops when, over the last ``patience`` checks (the *window*):

1. the recommendation is feasible on train at every one of them (a stop never ships a
   solution that misses the constraints it was asked to meet);
2. its true objective moved by at most ``objective_tol`` (max − min over the window);
3. its objective is within ``best_tol`` of the best objective of the iterates logged in the
   window (the model at each check) — on the flat start the LP mixes near-constant early
   snapshots into a feasible but poor solution that looks settled while the iterates are
   still improving.

The game is not zero-sum for ratio problems (the proxy-Lagrangian), so no duality gap
certifies it; this certificate is about the output, the object a user deploys.

The check is incremental: a snapshot's integer cell counts on train are taken once, at the
first check after it was recorded
(:meth:`~fairgames.train.evaluation.SolutionEvaluator.counts_each`); the current model is
counted at each check; the LP is re-solved on the stored values and every mixture it looks at
is evaluated from the weighted counts — milliseconds a check. Where counts do not give the
exact values (regression, thresholds other than 0, soft groups), the snapshots' scores are
kept instead and each mixture is evaluated by a pass over the split.

Example:
    >>> rule = StopRule(patience=2, objective_tol=0.01, best_tol=0.01)
    >>> a = Check(step=25, feasible=True, objective=0.20, iterate_objective=0.20)
    >>> b = Check(step=50, feasible=True, objective=0.205, iterate_objective=0.20)
    >>> rule.certify([a]) is None, rule.certify([a, b])["step"]
    (True, 50)
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from fairgames.data import TabularDataset
from fairgames.game.solutions import StochasticModel

from ..config import EARLY_STOP_DEFAULTS as DEFAULTS
from ..data import predict_scores
from ..evaluation import SolutionEvaluator
from ..hard_predictions import CellCounts
from .recommend import choose
from .solutions import constraint_rows

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Check:
    """One log interval's figures: the step, whether the recommendation there is feasible
    on train, its true objective there and the current iterate's."""

    step: int
    feasible: bool
    objective: float
    iterate_objective: float


@dataclass(frozen=True)
class StopRule:
    """The stopping rule (module docstring): ``patience`` checks, ``objective_tol`` and
    ``best_tol``.

    Example:
        >>> StopRule.from_mapping({"enabled": True, "patience": 4}).patience
        4
    """

    patience: int = DEFAULTS["patience"]
    objective_tol: float = DEFAULTS["objective_tol"]
    best_tol: float = DEFAULTS["best_tol"]

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> StopRule:
        """The rule of a ``trainer.early_stop`` mapping (``enabled`` is not the rule's)."""
        v = early_stop_mapping(values)
        return cls(int(v["patience"]), float(v["objective_tol"]), float(v["best_tol"]))

    def certify(self, checks: Sequence[Check]) -> dict[str, Any] | None:
        """The certificate for stopping at the last of ``checks``, or ``None`` (go on).

        Example:
            >>> rule = StopRule(patience=2)
            >>> infeasible = Check(25, False, 0.15, 0.15)
            >>> rule.certify([infeasible, Check(50, True, 0.15, 0.15)]) is None
            True
        """
        window = list(checks)[-self.patience:]
        if len(window) < self.patience or not all(c.feasible for c in window):
            return None
        objectives = [c.objective for c in window]
        if not all(math.isfinite(f) for f in objectives):
            return None
        moved = max(objectives) - min(objectives)
        best_iterate = min(c.iterate_objective for c in window)
        above = window[-1].objective - best_iterate
        if moved > self.objective_tol or above > self.best_tol:
            return None
        return {"step": window[-1].step, "window": [c.step for c in window],
                "objective": window[-1].objective, "objective_moved": moved,
                "best_iterate_objective": best_iterate, "above_best_iterate": above}


class TrainValues:
    """Each candidate's exact values on one split, computed once per candidate key: the
    integer cell counts where they give the exact values, else the scores (module
    docstring). ``add`` counts new candidates; ``choose`` applies the ``auto`` rule to a
    list of keys."""

    def __init__(self, evaluator: SolutionEvaluator, split: TabularDataset,
                 baseline: torch.Tensor | None) -> None:
        self.evaluator, self.split, self.baseline = evaluator, split, baseline
        self.senses = [c.sense for c in evaluator.constraints]
        self.values: dict[Any, tuple[float, list[float]]] = {}
        self.counts: dict[Any, torch.Tensor] = {}
        self.scores: dict[Any, torch.Tensor] = {}
        self._layout: CellCounts | None = None

    def __contains__(self, key: Any) -> bool:
        return key in self.values

    def add(self, keys: Sequence[Any], scores: torch.Tensor) -> None:
        """Count the candidates ``keys`` from their scores ``[R, N]`` on the split."""
        counts = self.evaluator.counts_each(self.split, scores, self.baseline)
        if counts is None:
            each = [self.evaluator.statements(self.split, row, baseline_scores=self.baseline)
                    for row in scores]
            self.scores.update(zip(keys, scores, strict=True))
        else:
            self._layout = counts
            each = self.evaluator.statements_of_counts(counts)
            self.counts.update(zip(keys, counts.sums, strict=True))
        for key, m in zip(keys, each, strict=True):
            f = m["objective"] if m["objective"] is not None else math.inf
            self.values[key] = (f, constraint_rows(m, self.senses))

    def forget(self, keep: Sequence[Any]) -> None:
        """Drop the candidates not in ``keep`` (snapshots the recorder no longer holds)."""
        kept = set(keep)
        for store in (self.values, self.counts, self.scores):
            for key in [k for k in store if k not in kept]:
                del store[key]

    def mixture(self, keys: Sequence[Any], weights: torch.Tensor) -> tuple[float, list[float]]:
        """Objective and ``g ≤ 0`` rows of the mixture ``weights`` ``[R]`` of ``keys``."""
        rows = [i for i, w in enumerate(weights.tolist()) if w]
        q = weights[rows]
        if all(keys[i] in self.counts for i in rows):
            assert self._layout is not None
            sums = torch.stack([self.counts[keys[i]] for i in rows])
            counts = CellCounts(self.split, self._layout.layout, sums)
            m = self.evaluator.statements_of_counts(counts, q)[0]
        else:
            s = torch.stack([self.scores[keys[i]] for i in rows])
            m = self.evaluator.statements(self.split, s, baseline_scores=self.baseline,
                                          mixture_weights=q.to(s.device, torch.float32))
        f = m["objective"] if m["objective"] is not None else math.inf
        return f, constraint_rows(m, self.senses)

    def recommend(self, keys: Sequence[Any]) -> tuple[bool, float]:
        """Whether the ``auto`` rule's choice among ``keys`` is feasible on the split, and
        its true objective."""
        objectives = [self.values[k][0] for k in keys]
        rows = [self.values[k][1] for k in keys]
        if not any(math.isfinite(f) and all(map(math.isfinite, g))
                   for f, g in zip(objectives, rows, strict=True)):
            # no candidate is defined yet (e.g. KLD of a near-constant early model): the LP
            # has nothing to mix, and nothing is certified
            return False, math.inf
        c = choose(objectives, rows, lambda w: self.mixture(keys, w))
        f, g = self.mixture(keys, c.weights)
        return max(g, default=-math.inf) <= 0.0, f


class EarlyStop:
    """The engine's early stop: :meth:`observe` at each log interval returns whether to stop
    there. ``split`` is where the recommendation is chosen (train), ``baseline`` a churn
    baseline's scores on it, ``helpers`` the run's helper models (candidates too).

    Example:
        >>> import torch
        >>> from fairgames.data import make_synthetic
        >>> from fairgames.game import ConstrainedOptimizer, Problem
        >>> from fairgames.rates import error_rate, positive_prediction_rate
        >>> from fairgames.train.loop.engine import Engine, GameData, LogSettings
        >>> train = make_synthetic(n=300, d=3, seed=0).train
        >>> problem = Problem(error_rate(), [(positive_prediction_rate() >= 0.2).named("p")])
        >>> ev = SolutionEvaluator(problem.objective, list(problem.constraints.values()),
        ...                        "group")
        >>> model = torch.nn.Linear(3, 1)
        >>> _ = torch.nn.init.zeros_(model.weight), torch.nn.init.zeros_(model.bias)
        >>> copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1))
        >>> stop = EarlyStop(StopRule(patience=2, objective_tol=1.0, best_tol=1.0), ev, train)
        >>> engine = Engine(model, copt, GameData(train, "group"), steps=100,
        ...                 logging=LogSettings(every=10), early_stop=stop)
        >>> engine.run()
        >>> engine.step, stop.record()["stopped_at"]
        (20, 20)
    """

    def __init__(self, rule: StopRule, evaluator: SolutionEvaluator, split: TabularDataset,
                 baseline: torch.Tensor | None = None,
                 helpers: Mapping[str, torch.nn.Module] | None = None,
                 chunk: int = 65536) -> None:
        self.rule, self.split, self.chunk = rule, split, int(chunk)
        self.helpers = dict(helpers or {})
        self.train = TrainValues(evaluator, split, baseline)
        self.checks: list[Check] = []
        self.certificate: dict[str, Any] | None = None
        self.seconds = 0.0

    @property
    def stopped(self) -> bool:
        """Whether a check certified a stop (the loop ends there)."""
        return self.certificate is not None

    @torch.no_grad()
    def observe(self, engine: Any) -> bool:
        """Check at the engine's current step (a log interval): record its figures, and
        return whether the rule certifies a stop there."""
        started = time.perf_counter()
        keys = self._candidates(engine)
        feasible, objective = self.train.recommend(keys)
        current = ("snapshot", engine.step) if ("snapshot", engine.step) in keys \
            else ("model", engine.step)
        self.checks.append(Check(engine.step, feasible, objective,
                                 self.train.values[current][0]))
        self.certificate = self.rule.certify(self.checks)
        self.seconds += time.perf_counter() - started
        if self.stopped:
            LOG.info("early stop at step %d: %s (the %d checks took %.3f s)", engine.step,
                     self.certificate, len(self.checks), self.seconds)
        return self.stopped

    def _candidates(self, engine: Any) -> list[Any]:
        """The candidates' keys (snapshots kept, the current model unless a snapshot is of
        this step, the helpers), each counted once."""
        recorder = engine.snapshots
        steps = list(recorder.steps)
        keys: list[Any] = [("snapshot", s) for s in steps]
        new = [i for i, k in enumerate(keys) if k not in self.train]
        if new:
            stacked = recorder.stacked()
            members = {n: t[new] for n, t in stacked.items()}
            mixture = StochasticModel(engine.model, members, steps=[steps[i] for i in new])
            self.train.add([keys[i] for i in new],
                           predict_scores(mixture, self.split.features, self.chunk))
        for name, module in self.helpers.items():
            if ("helper", name) not in self.train:
                scores = predict_scores(module, self.split.features, self.chunk)
                self.train.add([("helper", name)], scores[None])
        if not steps or steps[-1] != engine.step:
            key = ("model", engine.step)
            scores = predict_scores(engine.model, self.split.features, self.chunk)
            self.train.add([key], scores[None])
            keys.append(key)
        keys += [("helper", name) for name in self.helpers]
        # the current model's values are needed once; evicted snapshots never again
        self.train.forget(keys)
        return keys

    def record(self) -> dict[str, Any]:
        """``results.json``'s ``training.early_stop``: the rule, where it stopped (``None``:
        it did not) and its certificate's figures, and the checks made (their seconds are
        :attr:`seconds`, in ``train.log``: a resumed run's record equals the straight one's)."""
        last = self.checks[-1] if self.checks else None
        return {"enabled": True, "rule": asdict(self.rule),
                "stopped_at": self.certificate["step"] if self.certificate else None,
                "certificate": self.certificate, "checks": len(self.checks),
                "last_check": asdict(last) if last is not None else None}

    def state_dict(self) -> dict[str, Any]:
        """The checks made and the certificate (the counts are recomputed after a resume:
        the snapshots are in the checkpoint)."""
        return {"checks": [asdict(c) for c in self.checks], "certificate": self.certificate,
                "rule": asdict(self.rule)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.checks = [Check(**c) for c in state["checks"]]
        self.certificate = state["certificate"]


def early_stop_mapping(values: Mapping[str, Any] | None) -> dict[str, Any]:
    """``trainer.early_stop`` with the defaults filled in.

    Example:
        >>> early_stop_mapping({"patience": 5})["best_tol"]
        0.005
    """
    return {**DEFAULTS, **dict(values or {})}


def disabled_record(reason: str) -> dict[str, Any]:
    """``training.early_stop`` of a run that did not check: why."""
    return {"enabled": False, "reason": reason}


def early_stop_line(results: Mapping[str, Any]) -> str | None:
    """The CLI's line for a run the early stop ended (``None``: it played every step).

    Example:
        >>> cert = {"step": 225, "window": [175, 200, 225], "objective": 0.1512,
        ...         "objective_moved": 0.0006, "best_iterate_objective": 0.1511,
        ...         "above_best_iterate": 0.0001}
        >>> print(early_stop_line({"training": {"early_stop": {"enabled": True,
        ...     "stopped_at": 225, "certificate": cert}}}))  # doctest: +NORMALIZE_WHITESPACE
        stopped early at step 225 (trainer.early_stop): the recommendation is feasible on train
        at steps 175, 200, 225, its train objective 0.1512 moved by 0.0006 over them and is
        0.0001 above the best iterate's there
    """
    record = (results.get("training") or {}).get("early_stop") or {}
    cert = record.get("certificate")
    if not record.get("enabled") or cert is None:
        return None
    steps = ", ".join(str(s) for s in cert["window"])
    return (f"stopped early at step {cert['step']} (trainer.early_stop): the recommendation "
            f"is feasible on train at steps {steps}, its train objective "
            f"{cert['objective']:.4f} moved by {cert['objective_moved']:.4f} over them and is "
            f"{cert['above_best_iterate']:.4f} above the best iterate's there")
