"""Paper 000 Table 2 as named configurations: which payoff each player sees, which strategy it
plays.

======================  ========  ===============  ===============  ===================  ====
preset                  problems  θ-player         slack player     λ-player             ZS
======================  ========  ===============  ===============  ===================  ====
``frank_wolfe`` [1]_    P1        BR on L2         BR (inside λ)    FTL, true            yes
``spade`` [1]_          P1        OGD on L̃2       BR               OGD, surrogate       yes
``nemsis`` [2]_         P1        OGD on L̃2       BR (inside λ)    FTL, surrogate       yes
``algorithm1``          P1–P2     BR (CSO) on L2   BR               OGD, true            yes
``algorithm2``          P1–P2     OGD on L̃2       BR               OGD, true            no
``algorithm3`` [4]_     P3        OGD on L̃_sr     BR on a, b       OGD, true            no
``lagrangian`` [3]_     P2        OGD on L̃        BR               OGD, true            no
``proxy_lagrangian``    any       OGD on L̃        BR               swap regret, true    no
======================  ========  ===============  ===============  ===================  ====

.. [1] Narasimhan, Kar, Jain 2015. .. [2] Kar et al. 2016. .. [3] Cotter, Jiang, Sridharan
   2019 (Definition 1; Definition 2 and Algorithm 2 for the proxy-Lagrangian). Equilibria
   (paper 000): Nash for the zero-sum rows, coarse-correlated for Algorithm 2, none proven for
   Algorithm 3 (a heuristic).
.. [4] Table 2 plays the ratio slacks ``a, b`` of Algorithm 3 by OGD. ``c·a/b`` has the
   Hessian ``c·[[0, −1/b²], [−1/b², 2a/b³]]``, indefinite (determinant ``−c²/b⁴ < 0``) for every
   ``(a, b)`` and either sign of ``c``, so the subgame of the slacks against their rows'
   multipliers has no interior saddle point: OGD on ``(a, b)`` against gradient ascent on those
   multipliers drifts to a corner of the box (measured on paper 000's Table 4 problems:
   mixtures at F1 0.39–0.62 against the paper's 0.63–0.93). The preset therefore plays that
   subgame exactly: with the slack rows as the slacks' hard constraints, ``min c·w·a/b`` over
   ``a ≤ num, b ≥ den`` (``c < 0``; reversed for ``c > 0``) is attained at the tight point
   ``a = num, b = den`` with KKT multipliers ``|c|w/den`` and ``|c|w·num/den²``, which hand the
   θ-player the ratio's gradient ``c·w·(∇num − (num/den)∇den)/den`` — the ``"linearize"``
   ratio mode. ``ratio_slacks="num_den"`` keeps Table 2's OGD slacks as an option.

"BR inside λ" means the slacks take their best response to each λ the λ-player considers, i.e.
the λ-player's payoff is ``min_ξ L``. Players that see the surrogate ``L̃`` cannot take a ψ that
is monotone in neither direction (KLD) with a bound surrogate (hinge, logistic): its bounds
leave ψ's domain (Remark 3), so the optimizer refuses such a problem under ``spade`` and
``nemsis``. A surrogate bounded in [0, 1] (sigmoid, ramp) meets the Remark's proviso and plays.

The default of :class:`~fairgames.game.ConstrainedOptimizer` is ``proxy_lagrangian`` (the
robust choice: its last iterate does not swing with the dual step size). Compose your own
with :meth:`Preset.replace` or by building a :class:`Preset`. A preset is the one place where
its strategy names become players: :meth:`Preset.build_players` makes the θ-player, the slack
player (when the problem has slacks), the multipliers (each with the payoff the preset gives
it) and the monitor; the optimizer then only plays the list. New strategies join by name
through :func:`~fairgames.game.players.register_multiplier_strategy` (λ) and
:func:`~fairgames.game.players.register_theta_strategy` (θ); players of other kinds join a
game through the optimizer's ``players=`` argument.

Each player class declares the settings it takes from a run config in ``config_keys``
(:class:`~fairgames.game.players.keys.ConfigKey`: ``theta_steps`` for the best-response
θ-player; ``multiplier_lr``, ``radius``, ``multiplier_optimizer`` and νPI's ``nupi_kp``,
``nupi_ki``, ``nupi_nu`` for gradient ascent;
``multiplier_lr``, ``radius`` for exponentiated gradient; ``radius`` for follow-the-leader;
``multiplier_lr`` for swap regret; ``slack_lr``, ``psi_steps`` for the slacks). A preset's
settings are its players' (:meth:`Preset.config_keys`), and
:meth:`Preset.optimizer_arguments` turns a config's values into the optimizer's arguments,
so a strategy that declares a new key is configurable without a central list.

Example:
    >>> p = PRESETS["algorithm2"].replace(multipliers="exponentiated_gradient", name="eg")
    >>> p.theta, p.multipliers, p.multiplier_payoff
    ('gradient', 'exponentiated_gradient', 'true')
    >>> sorted(PRESETS["algorithm1"].config_keys())  # doctest: +NORMALIZE_WHITESPACE
    ['multiplier_lr', 'multiplier_optimizer', 'nupi_ki', 'nupi_kp', 'nupi_nu', 'psi_steps',
     'radius', 'slack_lr', 'theta_steps']
    >>> sorted(PRESETS["proxy_lagrangian"].config_keys())
    ['multiplier_lr', 'psi_steps', 'slack_lr']
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from .lagrangian import LagrangianTerms
from .players.base import Player
from .players.keys import ConfigKey, merge_keys
from .players.monitor import MonitorPlayer
from .players.multipliers import MULTIPLIER_PLAYERS, MultiplierPlayer, make_multiplier_player
from .players.slacks import PSI_STRATEGIES, SlackPlayer
from .players.theta import THETA_PLAYERS, BestResponsePlayer, ThetaPlayer, make_theta_player
from .problem import RATIO_MODES as RATIO_STRATEGIES
from .problem import Problem

PAYOFFS = ("true", "surrogate")
THETA_STRATEGIES = tuple(THETA_PLAYERS)
ROLES = {"theta": "θ-player", "slacks": "slack player", "multipliers": "λ-player",
         "monitor": "infeasibility monitor"}
"""A game's player roles (a player's ``name``) and how messages call them."""


@dataclass
class PlayerOptions:
    """A user's choices beyond the preset's (the :class:`~fairgames.game.ConstrainedOptimizer`
    arguments of the same names); ``None`` keeps the preset's, else the strategy's default."""

    multipliers: MultiplierPlayer | None = None
    multiplier_lr: float | None = None
    radius: float | None = None
    multiplier_options: Mapping[str, Any] = field(default_factory=dict)
    theta: ThetaPlayer | None = None
    slack_lr: float | None = None
    psi_steps: int = 100
    monitor_options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Preset:
    """A named choice of payoff and strategy for every player (a row of Table 2).

    Attributes:
        name: the preset's name.
        theta: ``"gradient"`` (OGD through the wrapped optimizer) or ``"best_response"``.
        theta_payoff: ``"surrogate"`` (``L̃``) or ``"true"`` (a CSO oracle on ``L``).
        multipliers: a multiplier strategy (``"gradient_ascent"``, ``"exponentiated_gradient"``,
            ``"follow_the_leader"``, ``"swap_regret"``).
        multiplier_payoff: ``"true"`` or ``"surrogate"``.
        psi_slacks: ``"best_response"`` or ``"gradient"``.
        ratio_slacks: how ratio terms ``c·num/den`` are played (see
            :mod:`fairgames.game.lagrangian`): ``"linearize"`` (no slack: the ratio's value is
            the true one and the θ-player sees its gradient at the true rates), ``"num_den"``
            (paper 000 Algorithm 3: ``c·a/b`` with a numerator slack ``a`` and a denominator
            slack ``b`` on projected OGD in their box) or ``"gradient"`` (one ratio slack ``z``
            with a bilinear row, Cotter et al. 2019, on projected OGD).
        slack_lr, multiplier_lr, radius: the preset's default step sizes and κ (``None``: the
            optimizer's defaults); arguments of the optimizer override them.
        problems: the problem classes the preset is meant for (documentation).
        zero_sum: whether all players see the same payoff.
        equilibrium: the equilibrium the paper proves (documentation).
    """

    name: str
    theta: str = "gradient"
    theta_payoff: str = "surrogate"
    multipliers: str = "swap_regret"
    multiplier_payoff: str = "true"
    psi_slacks: str = "best_response"
    ratio_slacks: str = "linearize"
    slack_lr: float | None = None
    multiplier_lr: float | None = None
    radius: float | None = None
    problems: tuple[str, ...] = ("P1", "P2", "P3")
    zero_sum: bool = False
    equilibrium: str = ""
    description: str = ""

    def __post_init__(self) -> None:
        if self.theta not in THETA_PLAYERS:
            raise ValueError(f"{self.name}: theta must be one of {tuple(THETA_PLAYERS)}, "
                             f"got {self.theta!r}")
        for field_name in ("theta_payoff", "multiplier_payoff"):
            if getattr(self, field_name) not in PAYOFFS:
                raise ValueError(f"{self.name}: {field_name} must be one of {PAYOFFS}, got "
                                 f"{getattr(self, field_name)!r}")
        if self.theta == "gradient" and self.theta_payoff == "true":
            raise ValueError(f"{self.name}: a gradient θ-player cannot see the true rates (0/1 "
                             "indicators have no gradient); use theta='best_response' with an "
                             "oracle, or theta_payoff='surrogate'")
        if self.multipliers not in MULTIPLIER_PLAYERS:
            raise ValueError(f"{self.name}: unknown multiplier strategy {self.multipliers!r}; "
                             f"choose one of {sorted(MULTIPLIER_PLAYERS)}")
        if self.psi_slacks not in PSI_STRATEGIES:
            raise ValueError(f"{self.name}: psi_slacks must be one of {PSI_STRATEGIES}")
        if self.ratio_slacks not in RATIO_STRATEGIES:
            raise ValueError(f"{self.name}: ratio_slacks must be one of {RATIO_STRATEGIES}")

    def replace(self, **changes: object) -> Preset:
        """A copy with some choices changed (e.g. ``multipliers="exponentiated_gradient"``)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise TypeError(f"unknown preset field(s) {sorted(unknown)}")
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def player_classes(self, multipliers: str | None = None) -> dict[str, type[Player]]:
        """The classes of the preset's players by role (:data:`ROLES`), with ``multipliers``
        (a strategy name) in place of the preset's λ strategy when given.

        Example:
            >>> classes = PRESETS["algorithm1"].player_classes(multipliers="swap_regret")
            >>> [cls.__name__ for cls in classes.values()]
            ['BestResponsePlayer', 'SlackPlayer', 'SwapRegret', 'MonitorPlayer']
        """
        strategy = multipliers or self.multipliers
        if strategy not in MULTIPLIER_PLAYERS:
            raise ValueError(f"unknown multiplier strategy {strategy!r}; choose one of "
                             f"{sorted(MULTIPLIER_PLAYERS)}")
        return {"theta": THETA_PLAYERS[self.theta], "slacks": SlackPlayer,
                "multipliers": MULTIPLIER_PLAYERS[strategy], "monitor": MonitorPlayer}

    def config_keys(self, multipliers: str | None = None) -> dict[str, ConfigKey]:
        """The settings the preset's players take (see :meth:`player_classes`), by name."""
        return {key.name: key for cls in self.player_classes(multipliers).values()
                for key in cls.config_keys}

    def lambda_defaults(self, multipliers: str | None = None) -> dict[str, float]:
        """The step size and κ (``multiplier_lr``, ``radius``) the λ-player plays when they are
        left unset: the preset's own when its λ strategy plays (or ``multipliers`` names it),
        else the named strategy's own defaults (its constructor's) — never the preset's value
        handed to another strategy. A setting the strategy does not take is absent.

        Example:
            >>> PRESETS["algorithm3"].lambda_defaults()
            {'multiplier_lr': 0.3, 'radius': 10.0}
            >>> PRESETS["algorithm3"].lambda_defaults("swap_regret")
            {'multiplier_lr': 1.0}
        """
        strategy = multipliers or self.multipliers
        cls = self.player_classes(strategy)["multipliers"]
        own = strategy == self.multipliers
        params = inspect.signature(cls).parameters
        out = {}
        for key, preset_value, argument in (("multiplier_lr", self.multiplier_lr, "lr"),
                                             ("radius", self.radius, "radius")):
            value = preset_value if own and preset_value is not None else (
                params[argument].default if argument in params else None)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[key] = float(value)
        return out

    def optimizer_arguments(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """:class:`~fairgames.game.ConstrainedOptimizer` keyword arguments that play this
        preset with a run config's settings: ``config`` maps keys to values (``multipliers``:
        a λ strategy in place of the preset's; the keys its players declare, each absent or
        ``None`` one at its default; other keys are not read). Values are expected valid
        (the training layer checks them first).

        Example:
            >>> args = PRESETS["algorithm1"].optimizer_arguments({"theta_steps": 5,
            ...                                                   "multiplier_lr": 0.1})
            >>> args["theta"], args["multiplier_lr"], args["slack_lr"]
            (BestResponsePlayer(steps=5, oracle=None), 0.1, 0.05)
        """
        classes = self.player_classes(config.get("multipliers"))
        args = {role: _arguments(cls, config) for role, cls in classes.items()}
        lam, slacks = args["multipliers"], args["slacks"]
        if set(slacks) - {"lr", "psi_steps"}:
            raise ValueError(f"the optimizer hands the slack player lr and psi_steps only, got "
                             f"{sorted(slacks)}")
        out = {"preset": self, "multipliers": config.get("multipliers"),
               "multiplier_lr": lam.pop("lr", None), "radius": lam.pop("radius", None),
               "multiplier_options": lam, "theta": classes["theta"](**args["theta"]),
               "slack_lr": slacks.get("lr"), "monitor_options": args["monitor"]}
        if "psi_steps" in slacks:
            out["psi_steps"] = slacks["psi_steps"]
        return out

    def build_players(self, problem: Problem, terms: LagrangianTerms, device: torch.device,
                      options: PlayerOptions | None = None) -> list[Player]:
        """The preset's players for ``terms`` (compiled with :attr:`ratio_slacks`) on
        ``device``: θ, the slacks (when the problem has any), the multipliers, the monitor."""
        o = options if options is not None else PlayerOptions()
        self.check_payoffs(problem, terms)
        players: list[Player] = [make_theta_player(o.theta or self.theta),
                                 self._multiplier_player(terms, device, o),
                                 MonitorPlayer(device=device, **dict(o.monitor_options))]
        if terms.has_slacks:
            lr = o.slack_lr if o.slack_lr is not None else (
                self.slack_lr if self.slack_lr is not None else 0.05)
            players.append(SlackPlayer(terms, psi=self.psi_slacks, lr=lr,
                                       psi_steps=o.psi_steps))
        return players

    def _multiplier_player(self, terms: LagrangianTerms, device: torch.device,
                           o: PlayerOptions) -> MultiplierPlayer:
        if o.multipliers is not None:
            return make_multiplier_player(o.multipliers, terms.num_rows)
        lr = self.multiplier_lr if o.multiplier_lr is None else o.multiplier_lr
        radius = self.radius if o.radius is None else o.radius
        kw = {"payoff": self.multiplier_payoff, **o.multiplier_options}
        return make_multiplier_player(self.multipliers, terms.num_rows, lr=lr, radius=radius,
                                      device=device, **kw)

    def check_payoffs(self, problem: Problem, terms: LagrangianTerms) -> None:
        """Refuse a surrogate-payoff λ-player on a ψ that leaves its domain (Remark 3)."""
        if self.multiplier_payoff == "surrogate" and not problem.surrogate.in_unit_interval:
            # Remark 3: "unless the surrogates are also bounded in the same range" — a
            # smooth approximation (sigmoid, ramp) keeps every surrogate rate in [0, 1], and
            # the λ-player's payoff then stays inside ψ's domain (its boundary is clamped).
            bad = terms.non_monotone_terms()
            if bad:
                raise ValueError(
                    f"preset {self.name!r}: the λ-player sees surrogate rates, but {bad} is "
                    "monotone in neither direction in a model-dependent argument (e.g. KLD's "
                    f"p̂): the {problem.surrogate.kind} bounds leave ψ's domain, so this "
                    "game cannot be played on them (paper 000 Remark 3). Use a true-payoff "
                    "λ-player (algorithm2, proxy_lagrangian), or a surrogate bounded in "
                    "[0, 1] (surrogate='sigmoid' or 'ramp')")


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("frank_wolfe", theta="best_response", theta_payoff="true",
           multipliers="follow_the_leader", multiplier_payoff="true",
           psi_slacks="best_response", problems=("P1",), zero_sum=True, equilibrium="Nash",
           description="Narasimhan et al. 2015: θ best-responds on L2; λ follows the leader "
                       "on min_ξ L1 + L2 (Remark 1)"),
    Preset("spade", theta="gradient", theta_payoff="surrogate", multipliers="gradient_ascent",
           multiplier_payoff="surrogate", psi_slacks="best_response", problems=("P1",),
           zero_sum=True, equilibrium="Nash",
           description="Narasimhan et al. 2015: Algorithm 2's strategies with the λ-player on "
                       "the surrogate L1 + L̃2 (Remark 2)"),
    Preset("nemsis", theta="gradient", theta_payoff="surrogate",
           multipliers="follow_the_leader", multiplier_payoff="surrogate",
           psi_slacks="best_response", problems=("P1",), zero_sum=True, equilibrium="Nash",
           description="Kar et al. 2016: θ OGD on L̃2; λ follows the leader on "
                       "min_ξ L1 + L̃2 (Remark 2)"),
    Preset("algorithm1", theta="best_response", theta_payoff="true",
           multipliers="gradient_ascent", multiplier_payoff="true", psi_slacks="best_response",
           problems=("P1", "P2"), zero_sum=True, equilibrium="Nash",
           description="paper 000 Algorithm 1: CSO oracle for θ, BR slacks, OGD λ"),
    Preset("algorithm2", theta="gradient", theta_payoff="surrogate",
           multipliers="gradient_ascent", multiplier_payoff="true", psi_slacks="best_response",
           problems=("P1", "P2"), zero_sum=False, equilibrium="coarse-correlated",
           description="paper 000 Algorithm 2: OGD θ on surrogates, BR slacks, OGD λ on true "
                       "rates"),
    Preset("algorithm3", theta="gradient", theta_payoff="surrogate",
           multipliers="gradient_ascent", multiplier_payoff="true", psi_slacks="gradient",
           ratio_slacks="linearize", multiplier_lr=0.3, radius=10.0,
           problems=("P3",), zero_sum=False, equilibrium="",
           description="paper 000 Algorithm 3: OGD for θ (surrogates) and λ (true rates); the "
                       "numerator/denominator slacks a, b of each ratio and their rows' "
                       "multipliers play the exact solution of their subgame (tight slacks, "
                       "a = num, b = den: the linearised ratio) instead of OGD, which has no "
                       "rest point there; a heuristic"),
    Preset("lagrangian", theta="gradient", theta_payoff="surrogate",
           multipliers="gradient_ascent", multiplier_payoff="true", psi_slacks="best_response",
           problems=("P2",), zero_sum=False, equilibrium="coarse-correlated",
           description="the plain two-player Lagrangian (Cotter et al. 2019 Definition 1; "
                       "TFCO's LagrangianOptimizer): OGD θ on surrogates, projected gradient "
                       "ascent λ on true constraints"),
    Preset("proxy_lagrangian", theta="gradient", theta_payoff="surrogate",
           multipliers="swap_regret", multiplier_payoff="true", psi_slacks="best_response",
           problems=("P1", "P2", "P3"), zero_sum=False, equilibrium="",
           description="Cotter, Jiang, Sridharan 2019 (Definition 2, Algorithm 2): the "
                       "λ-player minimises swap regret on the true constraints; the default"),
)}

DEFAULT_PRESET = "proxy_lagrangian"
LARGE_GAME_PRESET = "lagrangian"
SWAP_REGRET_MAX_ROWS = 1024
"""Multiplier rows above which the default preset (swap regret: a dense ``(M+1)²`` matrix,
O(M²) per step) gives way to :data:`LARGE_GAME_PRESET` (projected gradient ascent, O(M))."""


class LargeGameWarning(UserWarning):
    """The default preset was replaced by a preset whose cost is linear in the rows."""


def large_game_preset(rows: int) -> tuple[str, str] | None:
    """``(preset name, why)`` when a game of ``rows`` multiplier rows is too large for the
    default preset's swap-regret player (``None``: keep the default).

    Example:
        >>> large_game_preset(8) is None, large_game_preset(10_000)[0]
        (True, 'lagrangian')
    """
    if rows <= SWAP_REGRET_MAX_ROWS:
        return None
    return LARGE_GAME_PRESET, (
        f"{rows} multiplier rows > {SWAP_REGRET_MAX_ROWS}: the default preset "
        f"{DEFAULT_PRESET!r} (swap regret, a dense {rows + 1}² matrix per step) is replaced "
        f"by {LARGE_GAME_PRESET!r} (projected gradient ascent, linear in the rows); name a "
        "preset to choose (scripts/train.py and fit(): algorithm.large_game=keep)")


def resolve_game_preset(preset: str | Preset | None, *, rows: int, named_multipliers: bool,
                        **choice: Any) -> tuple[Preset, str | None]:
    """The preset a game of ``rows`` multiplier rows plays: :func:`resolve_preset`, except
    that a game too large for the default preset's swap regret plays the linear-cost preset
    instead, with a :class:`LargeGameWarning` (only when neither the preset nor the
    multipliers were named). Returns it and why the default was replaced (``None``: it was
    not).

    Example:
        >>> resolve_game_preset(None, rows=3, named_multipliers=False)[0].name
        'proxy_lagrangian'
    """
    resolved = resolve_preset(preset, **choice)
    switch = (large_game_preset(rows) if preset is None and not named_multipliers
              else None)
    if switch is None:
        return resolved, None
    resolved = resolve_preset(switch[0], **choice)
    warnings.warn(switch[1], LargeGameWarning, stacklevel=3)   # the optimizer's caller
    return resolved, switch[1]


def _arguments(cls: type[Player], config: Mapping[str, Any]) -> dict[str, Any]:
    """``cls``'s constructor arguments from a config's values of its keys (``None``: left to
    the player)."""
    out = {}
    for key in cls.config_keys:
        value = config.get(key.name, key.default)
        if value is not None:
            out[key.argument_name] = key.argument_value(value)
    return out


def strategy_classes() -> list[type[Player]]:
    """Every registered player class a preset can play, λ strategies first (then the slacks,
    the θ strategies, the monitor): the order of their keys in a config."""
    return [*MULTIPLIER_PLAYERS.values(), SlackPlayer, *THETA_PLAYERS.values(), MonitorPlayer]


def registered_config_keys() -> dict[str, tuple[ConfigKey, list[type[Player]]]]:
    """Every setting a registered player declares, with the classes that take it.

    Raises:
        ValueError: two classes declare one key with another type or default.

    Example:
        >>> keys = registered_config_keys()
        >>> [cls.__name__ for cls in keys["radius"][1]]
        ['GradientAscent', 'ExponentiatedGradient', 'FollowTheLeader']
    """
    owners: dict[str, tuple[ConfigKey, list[Any]]] = {}
    for cls in strategy_classes():
        for key in cls.config_keys:
            merge_keys(owners, key, cls)
    return owners


def player_label(cls: type[Player]) -> str:
    """How messages name a player class: its strategy and role, e.g. ``swap-regret
    λ-player``.

    Example:
        >>> player_label(MULTIPLIER_PLAYERS["swap_regret"]), player_label(SlackPlayer)
        ('swap-regret λ-player', 'slack player')
    """
    role = ROLES.get(cls.name, f"{cls.name} player")
    strategy = getattr(cls, "strategy", cls.name)
    return role if strategy == cls.name or strategy in ("theta", "multipliers") else (
        f"{strategy.replace('_', '-')} {role}")


def resolve_preset(preset: str | Preset | None, *, multipliers: str | None = None,
                   theta: str | ThetaPlayer | None = None, psi_slacks: str | None = None,
                   ratio_slacks: str | None = None,
                   payoffs: Mapping[str, str] | None = None) -> Preset:
    """The preset with a user's choices applied (the optimizer's arguments of these names):
    strategy names replace the preset's; a :class:`BestResponsePlayer` instance makes θ a best
    response (true payoff with an oracle)."""
    base = get_preset(preset)
    changes: dict[str, Any] = {}
    if multipliers is not None and multipliers != base.multipliers:
        # the preset's step size and κ belong to its own λ-player
        changes.update(multipliers=multipliers, multiplier_lr=None, radius=None)
    if isinstance(theta, str):
        changes["theta"] = theta
    if psi_slacks is not None:
        changes["psi_slacks"] = psi_slacks
    if ratio_slacks is not None:
        changes["ratio_slacks"] = ratio_slacks
    for who, payoff in dict(payoffs or {}).items():
        if who not in ("theta", "multipliers"):
            raise ValueError(f"payoffs are set for 'theta' and 'multipliers' (the slacks "
                             f"see λ only), got {who!r}")
        changes["theta_payoff" if who == "theta" else "multiplier_payoff"] = payoff
    if isinstance(theta, BestResponsePlayer) and base.theta != "best_response":
        changes["theta"] = "best_response"
        changes.setdefault("theta_payoff", "true" if theta.oracle else "surrogate")
    return base.replace(**changes) if changes else base


def get_preset(preset: str | Preset | None) -> Preset:
    """Look a preset up by name (``None`` → the default ``proxy_lagrangian``)."""
    if preset is None:
        return PRESETS[DEFAULT_PRESET]
    if isinstance(preset, Preset):
        return preset
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; known presets: {sorted(PRESETS)}")
    return PRESETS[preset]
