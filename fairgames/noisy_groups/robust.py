"""The ``robust`` config group (paper 004, noisy protected groups): the robust method's
player, the TV radii γ_j, and the robust part of ``results.json``.

``robust=none`` (the default) changes nothing. ``robust=dro`` adds the DRO adversary
(:class:`~fairgames.noisy_groups.dro.DROPlayer`) on the protected attribute, which then holds
the NOISY groups (``data.noise``, or a column that is noisy by nature). With the true groups
known on the training rows (``<protected>_true``, kept by ``data.noise``), ``γ_j`` can be read
off those rows: ``robust.gamma: estimate`` is paper 004's ``P(Ĝ ≠ G | G = j)`` (its Sec. 5 and
F.1; :func:`~fairgames.data.estimate_group_noise`), ``robust.gamma: tv`` the empirical TV
distance between the uniform distributions over the training rows of true group ``j`` and of
noisy group ``j``, ``1 − |G = j ∧ Ĝ = j| / max(|G = j|, |Ĝ = j|)`` — the larger of
``P(Ĝ ≠ G | G = j)`` and ``P(G ≠ Ĝ | Ĝ = j)``, and the premise of Theorem 1 on those rows even
when the groups' sizes differ (Lemma 1 needs equal sizes; uniform flips break it).

``robust=soft_assignments`` adds the soft-assignment player
(:class:`~fairgames.noisy_groups.soft_assignments.SoftAssignmentPlayer`, its noise model
``P(G = j | Ĝ = k)`` read off the training rows: :mod:`fairgames.noisy_groups.noise_model`).

Every run whose data has true groups, or that plays a robust method, reports per split
(``results.json`` ``robust``): the error, the noisy-group and the true-group maximum
violations, the exact TV-ball worst case of each constraint
(:func:`fairgames.noisy_groups.tv_ball.robust_values`) and the ``γ_j`` used; with the true groups
also the exact worst case over the soft assignments 𝒲 (an LP).

Example:
    >>> RobustConfig().name, RobustConfig(name="dro").projection
    ('none', 'exact')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from fairgames.data import DatasetSplits, TabularDataset, true_attribute
from fairgames.game import Problem
from fairgames.game.players import BestResponsePlayer
from fairgames.game.players.base import Player
from fairgames.game.solutions.stochastic import StochasticModel
from fairgames.train.config import players_of
from fairgames.train.config.checks import Checks

from .dro import ASCENTS, OPTIMIZERS, PROJECTIONS, DROPlayer
from .ideal_soft import IdealSettings
from .noise_model import noise_model, noise_table, soft_player, soft_values
from .select import SELECTS, RobustSelector
from .soft_assignments import SOFT_TIMINGS
from .tv_ball import robust_values

METHODS = ("none", "dro", "soft_assignments", "soft_assignments_ideal")
# each method's own keys: another method's, set away from its default, is refused
OWN_KEYS = {"dro": ("gamma", "projection", "ascent"),
            "soft_assignments": ("projection_iterations", "timing"),
            "soft_assignments_ideal": ("rounds", "theta_steps", "tau", "penalty_radius",
                                       "multiplier_lr", "radius")}
GAMMA_RULES = ("estimate", "tv")
# the trainer keys the ideal algorithm (its own full-batch loop, no CLI checkpoint) needs
IDEAL_TRAINER = {"epochs": None, "batch_size": None, "balanced_batches": False,
                 "constraint_split": "train", "resume": False, "stop_after": None,
                 "distributed": False, "tune": None, "compile": False}


@dataclass
class RobustConfig:
    """``robust.*``: ``name`` (``none`` | ``dro`` | ``soft_assignments``); the adversary's
    ``lr``, ``optimizer`` (``adam`` | ``sgd``) and ``steps`` (projected steps per game step);
    DRO's ``gamma`` (a TV radius per group value, one for all, ``"estimate"`` or ``"tv"``;
    null: ``estimate``), ``projection`` (``exact`` | ``authors``) and ``ascent``
    (``unscaled``: p̃ ascends the constraints themselves, so it moves at λ = 0 | ``scaled``:
    Algorithm 2's λ-weighted step); soft assignments'
    ``projection_iterations`` (Dykstra rounds) and ``timing`` (``before_theta``: Algorithm 4's
    order W → θ → λ; ``after_theta``: W one step behind); ``select``, the constraint values
    that choose the best iterate and the recommended solution (``noisy`` | ``tv`` |
    ``tv_sampled`` | ``soft``, :mod:`fairgames.noisy_groups.select`) and ``select_samples``
    (``tv_sampled``'s random ``p̃`` per group); the ideal algorithm's
    (``soft_assignments_ideal``, :mod:`fairgames.noisy_groups.ideal`) ``rounds``,
    ``theta_steps``, ``tau``, ``penalty_radius``, ``multiplier_lr`` and ``radius``."""

    name: str = "none"
    gamma: Any = None
    lr: float = 0.01
    optimizer: str = "adam"
    steps: int = 1
    projection: str = "exact"
    ascent: str = "unscaled"
    projection_iterations: int = 20
    timing: str = "before_theta"
    # the ideal preset's settings default to IdealSettings' own (one set of defaults)
    rounds: int = IdealSettings.rounds
    theta_steps: int = IdealSettings.theta_steps
    tau: float = IdealSettings.tau
    penalty_radius: float | None = IdealSettings.penalty_radius
    multiplier_lr: float | None = IdealSettings.multiplier_lr
    radius: float | None = IdealSettings.radius
    # the best iterate's constraint values (fairgames.noisy_groups.select)
    select: str = "noisy"
    select_samples: int = 20


def check_robust(c: Any, check: Checks) -> None:
    """The ``robust`` group's value rules (registered with the group, :mod:`.plugin`)."""
    r = c.get("robust")
    if r is None:
        return
    check.choice("robust.name", r.name, METHODS)
    check.choice("robust.optimizer", r.optimizer, OPTIMIZERS)
    check.choice("robust.projection", r.projection, PROJECTIONS)
    check.choice("robust.ascent", r.ascent, ASCENTS)
    check.positive("robust.lr", r.lr)
    check.positive("robust.steps", r.steps, integer=True)
    check.positive("robust.projection_iterations", r.projection_iterations, integer=True)
    check.choice("robust.timing", r.timing, SOFT_TIMINGS)
    _check_select(r, c, check)
    _check_ideal(r, c, check)
    defaults = RobustConfig()
    for method, keys in OWN_KEYS.items():
        for key in keys:
            if r.name != method and r.get(key) != getattr(defaults, key):
                check.bad(f"robust.{key}", r.get(key), f"a key of robust={method} only; "
                          f"robust={r.name} does not read it (drop it)")
    gamma = r.gamma
    values = list(gamma) if hasattr(gamma, "__len__") and not isinstance(gamma, str) else [gamma]
    if not (gamma is None or gamma in GAMMA_RULES or all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1
            for v in values)):
        check.bad("robust.gamma", gamma, "a TV radius in [0, 1], one per group value, or "
                  "'estimate' / 'tv' (from the training rows' true and noisy groups)")
    if r.name == "dro" and c.trainer.constraint_split != "train":
        check.bad("trainer.constraint_split", c.trainer.constraint_split,
                  "robust=dro reweights the training rows by id: use train")
    theta = (players_of(c.algorithm) or {}).get("theta")
    if r.name != "none" and theta is not None and issubclass(theta, BestResponsePlayer):
        check.bad("algorithm.name", c.algorithm.name, f"robust={r.name} needs a gradient "
                  "θ-player (its adversary moves with θ's steps)")


def _check_select(r: Any, c: Any, check: Checks) -> None:
    """``robust.select``: a rule of :data:`SELECTS`, for a robust method that plays the game
    (the ideal algorithm picks its own output); ``played`` for DRO on train (its ``p̃`` lives
    on the training rows); ``select_samples`` for ``tv_sampled`` only."""
    select, samples = r.get("select", "noisy"), r.get("select_samples", 20)
    check.choice("robust.select", select, SELECTS)
    check.positive("robust.select_samples", samples, integer=True)
    if select != "noisy" and r.name not in ("dro", "soft_assignments"):
        check.bad("robust.select", select, f"robust={r.name} has no robust constraint to "
                  "choose by: use robust=dro or robust=soft_assignments, or select=noisy")
    if select == "played" and r.name != "dro":
        check.bad("robust.select", select, "the p̃ the DRO adversary played: robust=dro only")
    if select == "played" and c.trainer.selection_split != "train":
        check.bad("trainer.selection_split", c.trainer.selection_split, "robust.select=played "
                  "reads the adversary's p̃ over the training rows: use train")
    if select != "tv_sampled" and samples != RobustConfig.select_samples:
        check.bad("robust.select_samples", samples, "read by robust.select=tv_sampled only "
                  "(drop it)")


def _check_ideal(r: Any, c: Any, check: Checks) -> None:
    """The ideal algorithm's keys (positive; null for Theorem 4/5's values); it plays the
    whole training split on its own, so the game's minibatch and held-out keys do not apply."""
    check.positive("robust.rounds", r.get("rounds", 5), integer=True)
    check.positive("robust.theta_steps", r.get("theta_steps", 10), integer=True)
    check.positive("robust.tau", r.get("tau", 0.05))
    for key in ("penalty_radius", "multiplier_lr", "radius"):
        check.positive(f"robust.{key}", r.get(key), allow_none=True)
    if r.name != "soft_assignments_ideal":
        return
    if r.steps != 1:
        check.bad("robust.steps", r.steps, "the ideal algorithm's rounds are robust.rounds "
                  "(Q) and trainer.steps (T): drop robust.steps")
    for key, wanted in IDEAL_TRAINER.items():
        if c.trainer.get(key) != wanted:
            check.bad(f"trainer.{key}", c.trainer.get(key), "robust=soft_assignments_ideal "
                      "plays the whole training split in one uninterrupted run on one "
                      f"process: leave it at {'null' if wanted is None else wanted}")


def estimate_gamma(train: TabularDataset, attribute: str, rule: str = "estimate"
                   ) -> list[float]:
    """Per group value ``j``, ``γ_j`` from the training rows' true and noisy groups:
    ``P(Ĝ ≠ G | G = j)`` (``rule="estimate"``) or the empirical TV distance (``"tv"``; see
    the module docstring).

    Example:
        >>> from fairgames.data import make_synthetic, noisy_splits
        >>> tr = noisy_splits(make_synthetic(n=500, seed=0), "group", 0.2, seed=0).train
        >>> [round(g, 3) for g in estimate_gamma(tr, "group")]
        [0.247, 0.233]
        >>> [round(g, 3) for g in estimate_gamma(tr, "group", "tv")]
        [0.247, 0.243]
    """
    true = true_attribute(attribute)
    if true not in train.groups:
        raise ValueError(f"robust.gamma={rule} needs the true groups of the training rows "
                         f"({true!r}): set data.noise, or give robust.gamma as numbers")
    t, h = train.groups[true].cpu(), train.groups[attribute].cpu()
    out = []
    for j in range(len(train.group_names[attribute])):
        a, b = int((t == j).sum()), int((h == j).sum())
        both = int(((t == j) & (h == j)).sum())
        size = max(a, b) if rule == "tv" else a
        out.append(1.0 - both / size if size else 0.0)
    return out


def resolve_gamma(cfg: RobustConfig, train: TabularDataset, attribute: str) -> list[float]:
    """``robust.gamma`` as one radius per value of ``attribute``."""
    n = len(train.group_names[attribute])
    if cfg.gamma is None or cfg.gamma in GAMMA_RULES:
        return estimate_gamma(train, attribute, cfg.gamma or "estimate")
    if isinstance(cfg.gamma, (int, float)):
        return [float(cfg.gamma)] * n
    values = [float(v) for v in cfg.gamma]
    if len(values) != n:
        raise ValueError(f"robust.gamma has {len(values)} values but {attribute!r} has {n} "
                         f"groups {train.group_names[attribute]}: give one per group")
    return values


def check_splits(splits: DatasetSplits, attribute: str) -> None:
    """Refuse a split in which a noisy group has no row (its robust rates are undefined)."""
    for name, ds in splits.items():
        counts = torch.bincount(ds.groups[attribute].cpu(),
                                minlength=len(ds.group_names[attribute]))
        empty = [ds.group_names[attribute][j] for j in range(len(counts)) if counts[j] == 0]
        if empty:
            raise ValueError(f"noisy group(s) {empty} of {attribute!r} have no row in the "
                             f"{name} split: the robust rates are undefined there; use a "
                             "larger split or merge the group")


def robust_players(cfg: RobustConfig | None, splits: DatasetSplits, attribute: str
                   ) -> list[Player]:
    """The players ``cfg`` adds to the game (none for ``robust=none``)."""
    if cfg is None or cfg.name == "none":
        return []
    check_splits(splits, attribute)
    train = splits.train
    if cfg.name == "soft_assignments":
        return [soft_player(train, attribute, lr=cfg.lr, steps=cfg.steps,
                            projection_iterations=cfg.projection_iterations,
                            optimizer=cfg.optimizer, timing=cfg.timing)]
    return [DROPlayer(attribute, train.groups[attribute].cpu(),
                      resolve_gamma(cfg, train, attribute), lr=cfg.lr, optimizer=cfg.optimizer,
                      steps=cfg.steps, projection=cfg.projection, ascent=cfg.ascent,
                      names=train.group_names[attribute])]


def robust_report(cfg: RobustConfig | None, problem: Problem, evaluator: Any,
                  model: torch.nn.Module, splits: DatasetSplits, attribute: str,
                  chunk: int) -> dict[str, Any] | None:
    """``results.json``'s ``robust`` block for the recommended ``model`` (``None`` when the
    run is not robust and its data holds no true groups)."""
    setup = _setup(cfg, splits.train, attribute)
    if setup is None:
        return None
    method, gamma, has_true, b = setup
    true, train = true_attribute(attribute), splits.train
    out: dict[str, Any] = {
        "method": method, "attribute": attribute, "true_attribute": true if has_true else None,
        "gamma": dict(zip(train.group_names[attribute], gamma, strict=True)),
        "gamma_source": ("estimate" if method != "dro" or cfg is None or cfg.gamma is None
                         else cfg.gamma if cfg.gamma in GAMMA_RULES else "given"),
        "solution": "recommended", "splits": {}}
    if b is not None:
        out["p_true_given_noisy"] = noise_table(train, attribute)
    for name, ds in splits.items():
        out["splits"][name] = _split_report(problem, evaluator, model, ds, attribute, gamma,
                                            chunk, has_true, b)
    return out


def _setup(cfg: RobustConfig | None, train: TabularDataset, attribute: str
           ) -> tuple[str, list[float], bool, torch.Tensor | None] | None:
    """``(method, γ, has the true groups, the noise model P(G | Ĝ) or None)``; ``None`` when
    the run is not robust and its data holds no true groups (nothing to report)."""
    has_true = true_attribute(attribute) in train.groups
    if (cfg is None or cfg.name == "none") and not has_true:
        return None
    method = "none" if cfg is None else cfg.name
    gamma = (resolve_gamma(cfg, train, attribute) if cfg is not None and cfg.name == "dro"
             else estimate_gamma(train, attribute))
    # the SA worst case needs the noise model P(G | Ĝ), read off the true groups of train
    b = noise_model(train, attribute) if has_true else None
    return method, gamma, has_true, b


def robust_selector(cfg: RobustConfig | None, problem: Problem, splits: DatasetSplits,
                    attribute: str, seed: int,
                    played: dict[int, torch.Tensor] | None = None) -> RobustSelector | None:
    """``robust.select``'s selector (``None``: the noisy-group constraints choose);
    ``played``: the adversary's ``p̃`` by training step (``select=played``)."""
    if cfg is None or cfg.select == "noisy":
        return None
    setup = _setup(cfg, splits.train, attribute)
    if setup is None or cfg.name not in ("dro", "soft_assignments"):
        raise ValueError(f"robust.select={cfg.select} needs robust=dro or soft_assignments")
    _, gamma, _, b = setup
    if cfg.select == "soft" and b is None:
        b = noise_model(splits.train, attribute)    # raises with the missing column's name
    if cfg.select == "played" and played is None:
        raise ValueError("robust.select=played needs the adversary's p̃ recorded at the "
                         "snapshots (the engine's SnapshotSettings.extra)")
    return RobustSelector(cfg.select, problem, attribute, gamma, b, cfg.select_samples, seed,
                          played)


def robust_log(cfg: RobustConfig | None, problem: Problem, evaluator: Any,
               splits: DatasetSplits, attribute: str, chunk: int
               ) -> Callable[[torch.nn.Module], dict[str, float | None]] | None:
    """TensorBoard's curves of the model on the whole training split, at log time only (the
    engine's ``LogSettings.extra``): ``robust/noisy/max_violation``, ``robust/true/<name>``
    and ``/max_violation``, the TV-ball worst case ``robust/tv/<name>`` and ``/max``, the
    worst case over 𝒲 ``robust/sa/<name>`` and ``/max``. ``None`` when there is nothing to
    report (see :func:`robust_report`)."""
    setup = _setup(cfg, splits.train, attribute)
    if setup is None:
        return None
    _, gamma, has_true, b = setup
    train = splits.train

    def scalars(model: torch.nn.Module) -> dict[str, float | None]:
        e = _split_report(problem, evaluator, model, train, attribute, gamma, chunk, has_true,
                          b)
        out = {"robust/noisy/max_violation": e["noisy_max_violation"],
               "robust/tv/max": e["robust_max"]}
        if has_true:
            out["robust/true/max_violation"] = e["true_max_violation"]
            out.update({f"robust/true/{n}": v for n, v in e["true_violations"].items()})
        out.update({f"robust/tv/{n}": v for n, v in e["robust_values"].items()})
        if b is not None:
            out["robust/sa/max"] = e["soft_max"]
            out.update({f"robust/sa/{n}": v for n, v in (e["soft_values"] or {}).items()})
        return out

    return scalars


def _split_report(problem: Problem, evaluator: Any, model: torch.nn.Module, ds: TabularDataset,
                  attribute: str, gamma: list[float], chunk: int, has_true: bool,
                  b: torch.Tensor | None) -> dict[str, Any]:
    from fairgames.train.data import (
        predict_scores,  # here: .data imports .config, which imports this
    )

    scores = predict_scores(model, ds.features, chunk)
    weights = model.weights if isinstance(model, StochasticModel) else None
    noisy = evaluator.evaluate(ds, scores, mixture_weights=weights)
    entry: dict[str, Any] = {"error": noisy.get("error"),
                             "noisy_max_violation": _max_violation(noisy)}
    if has_true:
        swapped = replace(ds, groups={**ds.groups, attribute: ds.groups[true_attribute(attribute)]})
        truth = evaluator.evaluate(swapped, scores, mixture_weights=weights)
        entry["true_max_violation"] = _max_violation(truth)
        entry["true_violations"] = {n: c["violation"] for n, c in truth["constraints"].items()}
    values = robust_values(problem.constraints, attribute, gamma, scores.cpu(), ds.labels.cpu(),
                           {k: v.cpu() for k, v in ds.groups.items()}, ds.group_names,
                           mixture_weights=None if weights is None else weights.cpu())
    entry["robust_values"] = values
    known = [v for v in values.values() if v is not None]
    entry["robust_max"] = max(known) if known else None
    if b is not None:
        soft = soft_values(problem, scores, ds, attribute, b, weights)
        entry["soft_values"] = soft
        found = [v for v in (soft or {}).values() if v is not None]
        entry["soft_max"] = max(found) if found else None
    return entry


def _max_violation(metrics: Mapping[str, Any]) -> float | None:
    found = [c["violation"] for c in metrics.get("constraints", {}).values()
             if c.get("violation") is not None]
    return max(found) if found else None


def robust_line(block: Mapping[str, Any]) -> str:
    """The CLI's line for the robust block.

    Example:
        >>> b = {"method": "dro", "gamma": {"a": 0.1}, "splits": {"test": {
        ...     "error": 0.2, "noisy_max_violation": 0.0, "true_max_violation": 0.01,
        ...     "robust_max": 0.03}}}
        >>> robust_line(b).split(": ")[1]
        'test error 0.2000, noisy max violation 0.0000, true 0.0100, robust 0.0300'
    """
    def f(v: Any) -> str:
        return "–" if v is None else f"{v:.4f}"

    gammas = ", ".join(f"{k}={v:.3f}" for k, v in block["gamma"].items())
    parts = []
    for split, e in block["splits"].items():
        soft = f", SA {f(e['soft_max'])}" if "soft_max" in e else ""
        parts.append(f"{split} error {f(e['error'])}, noisy max violation "
                     f"{f(e['noisy_max_violation'])}, true {f(e.get('true_max_violation'))}, "
                     f"robust {f(e['robust_max'])}{soft}")
    return f"robust ({block['method']}, γ {gammas}): " + "; ".join(parts)
