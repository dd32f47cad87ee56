"""Paper 000 Table 2: each preset has its defining choices, and the optimizer plays them."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from fairgames.game import (
    PRESETS,
    BestResponsePlayer,
    ConstrainedOptimizer,
    ExponentiatedGradient,
    FollowTheLeader,
    GradientAscent,
    GradientPlayer,
    MonitorPlayer,
    MultiplierPlayer,
    Preset,
    Problem,
    SlackPlayer,
    SwapRegret,
)
from fairgames.game.players import AugmentedLagrangian, QuadraticPenalty
from fairgames.rates import error_rate, fmeasure, gmean, group, true_positive_rate

# Table 2 (and the two Cotter et al. formulations): θ strategy, θ payoff, slacks, λ strategy,
# λ payoff, zero-sum.
TABLE_2 = {
    "frank_wolfe": ("best_response", "true", "best_response", "follow_the_leader", "true", True),
    "spade": ("gradient", "surrogate", "best_response", "gradient_ascent", "surrogate", True),
    "nemsis": ("gradient", "surrogate", "best_response", "follow_the_leader", "surrogate", True),
    "algorithm1": ("best_response", "true", "best_response", "gradient_ascent", "true", True),
    "algorithm2": ("gradient", "surrogate", "best_response", "gradient_ascent", "true", False),
    "algorithm3": ("gradient", "surrogate", "gradient", "gradient_ascent", "true", False),
    "lagrangian": ("gradient", "surrogate", "best_response", "gradient_ascent", "true", False),
    "proxy_lagrangian": ("gradient", "surrogate", "best_response", "swap_regret", "true", False),
}
PLAYER_CLASSES = {"gradient_ascent": GradientAscent, "follow_the_leader": FollowTheLeader,
                  "swap_regret": SwapRegret, "exponentiated_gradient": ExponentiatedGradient}


def test_every_table_2_row_is_a_preset():
    assert set(PRESETS) == set(TABLE_2)


@pytest.mark.parametrize("name", sorted(TABLE_2))
def test_preset_has_its_defining_choices(name, synthetic, helpers):
    theta, theta_payoff, slacks, lam, lam_payoff, zero_sum = TABLE_2[name]
    p = PRESETS[name]
    assert (p.theta, p.theta_payoff, p.psi_slacks, p.multipliers, p.multiplier_payoff,
            p.zero_sum) == (theta, theta_payoff, slacks, lam, lam_payoff, zero_sum)
    # Zero-sum exactly when θ and λ see the same payoff (a best-response θ plays L2 itself).
    assert p.zero_sum == ((theta_payoff == lam_payoff) or theta == "best_response")
    # The optimizer wires the matching players.
    if name == "algorithm3":
        a, b = group("group", "0"), group("group", "1")
        problem = Problem(-fmeasure(), [fmeasure(b) >= fmeasure(a) - 0.02])
    else:
        problem = Problem(1.0 - gmean())
    model = torch.nn.Linear(5, 1)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1),
                                preset=name)
    assert isinstance(copt.multipliers, PLAYER_CLASSES[lam])
    assert isinstance(copt.theta, BestResponsePlayer if theta == "best_response" else
                      GradientPlayer)
    if name == "algorithm3":
        # The ratio slacks a, b play their subgame's exact solution (tight slacks, see the
        # presets' note [4]): each of the 3 ratios is linearised, no slack, no bilinear row;
        # the only multiplier is the constraint's.
        assert p.ratio_slacks == copt.preset.ratio_slacks == "linearize"
        t = copt.terms
        assert t.num_linear == 3 and t.num_slacks == 0 and copt.slacks is None
        assert t.num_bilinear == 0 and not t.num_den_terms and t.num_rows == 1
        assert (copt.multipliers.lr, copt.multipliers.radius) == (p.multiplier_lr, p.radius)
        # Table 2's OGD on a, b stays available: a numerator and a denominator slack per
        # ratio, all on projected OGD.
        ogd = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1),
                                   preset=name, ratio_slacks="num_den", slack_lr=0.001)
        t = ogd.terms
        assert len(t.num_den_terms) == 3 and t.num_slacks == 6 and t.num_linear == 0
        assert t.slack_kinds == ["ratio"] * 6 and ogd.slacks is not None
        assert float(ogd.slacks.gradient_mask.min()) == 1.0 and ogd.slacks.lr == 0.001
    else:
        assert copt.slacks is not None and copt.slacks.psi == slacks
    for _ in range(3):
        idx = torch.arange(256)
        copt.step_batch(model, synthetic.features[idx], **helpers.fields(synthetic, idx))
    assert all(torch.isfinite(w).all() for w in copt.weights())


def test_spade_multipliers_see_the_surrogate_and_algorithm2_the_true_rates(synthetic, helpers):
    tpr = lambda v: true_positive_rate(group("group", v))  # noqa: E731
    problem = Problem(error_rate(), [tpr("0") - tpr("1") <= 0.05])
    idx = torch.arange(512)
    gains = {}
    for name in ("spade", "algorithm2"):
        torch.manual_seed(0)
        model = torch.nn.Linear(5, 1)
        copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.0),
                                    preset=name, multiplier_lr=1.0)
        copt.step_batch(model, synthetic.features[idx], **helpers.fields(synthetic, idx))
        gains[name] = (copt.last.rows_true, copt.last.rows_surrogate, copt.weights()[1])
    true, sur, lam = gains["spade"]
    assert float(sur[0]) > float(true[0])            # the sign-correct bound is an upper bound
    np.testing.assert_allclose(lam.numpy(), np.maximum(sur.numpy(), 0), atol=1e-6)
    true2, _, lam2 = gains["algorithm2"]
    np.testing.assert_allclose(lam2.numpy(), np.maximum(true2.numpy(), 0), atol=1e-6)


@pytest.mark.parametrize("name", ["frank_wolfe", "nemsis"])
def test_follow_the_leader_linearises_psi_at_the_mean_rates(synthetic, helpers, name):
    problem = Problem(1.0 - gmean())
    records = []
    theta = BestResponsePlayer(steps=3) if name == "frank_wolfe" else None
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 1)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1),
                                preset=name, theta=theta)
    copt.register_history_hook(records.append)
    for i in range(20):
        idx = torch.arange(i * 90, (i + 1) * 90)
        copt.step_batch(model, synthetic.features[idx], **helpers.fields(synthetic, idx))
    # Rows are ξ_k − R_k ≤ 0 (maximising gmean): the leader is ∇gmean at the mean of the
    # rates the λ-player sees — true rates for Frank-Wolfe, surrogate bounds for NEMSIS.
    rows = torch.stack([r.rows_true if name == "frank_wolfe" else r.rows_surrogate
                        for r in records])
    slacks = torch.stack([r.slacks for r in records])
    mean_r = (slacks - rows).mean(0).clamp(1e-6, 1 - 1e-6).numpy()
    grad = 0.5 * np.sqrt([mean_r[1] / mean_r[0], mean_r[0] / mean_r[1]])
    np.testing.assert_allclose(copt.weights()[1].numpy(), np.minimum(grad, 10.0), rtol=1e-4)


def test_a_user_composes_a_preset_from_parts(synthetic, helpers):
    mine = PRESETS["algorithm2"].replace(name="eg2", multipliers="exponentiated_gradient")
    assert isinstance(mine, Preset) and mine.multipliers == "exponentiated_gradient"
    model = torch.nn.Linear(5, 1)
    copt = ConstrainedOptimizer(Problem(1.0 - gmean()),
                                torch.optim.SGD(model.parameters(), lr=0.1), preset=mine)
    assert isinstance(copt.multipliers, ExponentiatedGradient)
    # Keyword arguments override a named preset's choices.
    copt = ConstrainedOptimizer(Problem(1.0 - gmean()),
                                torch.optim.SGD(model.parameters(), lr=0.1), preset="spade",
                                payoffs={"multipliers": "true"})
    assert copt.preset.multiplier_payoff == "true"
    with pytest.raises(ValueError, match="cannot see the true rates"):
        PRESETS["algorithm2"].replace(theta_payoff="true")
    with pytest.raises(TypeError, match="unknown preset field"):
        PRESETS["algorithm2"].replace(dual="x")
    with pytest.raises(ValueError, match="unknown multiplier strategy"):
        Preset("x", multipliers="hedge")


# The settings each player class takes from a run config (algorithm.<key>), as documented in
# docs/training.md, and the constructor argument each becomes.
PLAYER_SETTINGS = {
    GradientPlayer: {},
    BestResponsePlayer: {"theta_steps": "steps"},
    GradientAscent: {"multiplier_optimizer": "optimizer", "multiplier_lr": "lr",
                     "radius": "radius", "nupi_kp": "kp", "nupi_ki": "ki", "nupi_nu": "nu"},
    ExponentiatedGradient: {"multiplier_lr": "lr", "radius": "radius"},
    FollowTheLeader: {"radius": "radius"},
    SwapRegret: {"multiplier_lr": "lr"},
    AugmentedLagrangian: {"penalty": "penalty", "penalty_growth": "growth",
                          "penalty_tolerance": "tolerance", "penalty_restart": "restart"},
    QuadraticPenalty: {"penalty": "penalty", "penalty_growth": "growth",
                       "penalty_tolerance": "tolerance", "penalty_restart": "restart"},
    SlackPlayer: {"slack_lr": "lr", "psi_steps": "psi_steps"},
    MonitorPlayer: {},
}


@pytest.mark.parametrize("cls", list(PLAYER_SETTINGS), ids=lambda c: c.__name__)
def test_each_player_declares_the_settings_it_takes(cls):
    keys = {k.name: k.argument_name for k in cls.config_keys}
    assert keys == PLAYER_SETTINGS[cls]
    # each becomes an argument the constructor has
    params = inspect.signature(cls.__init__).parameters
    assert set(keys.values()) <= set(params)
    if issubclass(cls, MultiplierPlayer):       # make_multiplier_player's own flags agree
        assert cls.has_lr == ("multiplier_lr" in keys)
        assert cls.has_radius == ("radius" in keys)


@pytest.mark.parametrize("name", sorted(TABLE_2))
def test_a_presets_settings_are_its_players(name):
    theta, _, _, lam, _, _ = TABLE_2[name]
    theta_cls = BestResponsePlayer if theta == "best_response" else GradientPlayer
    expected = {**PLAYER_SETTINGS[theta_cls], **PLAYER_SETTINGS[SlackPlayer],
                **PLAYER_SETTINGS[PLAYER_CLASSES[lam]]}
    assert set(PRESETS[name].config_keys()) == set(expected)
    # with another λ strategy, that strategy's settings instead of the preset's
    swapped = PRESETS[name].config_keys(multipliers="swap_regret")
    assert set(swapped) == {*PLAYER_SETTINGS[theta_cls], *PLAYER_SETTINGS[SlackPlayer],
                            "multiplier_lr"}


def _player(copt, name):
    (player,) = [p for p in copt.players if p.name == name]
    return player


def test_a_preset_builds_its_players_from_config_settings():
    model = torch.nn.Linear(5, 1)
    settings = {"theta_steps": 5, "multiplier_lr": 0.2, "radius": 3.0, "slack_lr": 0.01,
                "psi_steps": 7, "multiplier_optimizer": "sgd", "surrogate": "ignored"}
    copt = ConstrainedOptimizer(Problem(1.0 - gmean()),
                                torch.optim.SGD(model.parameters(), lr=0.1),
                                **PRESETS["algorithm1"].optimizer_arguments(settings))
    theta, lam, slacks = (_player(copt, n) for n in ("theta", "multipliers", "slacks"))
    assert type(theta) is BestResponsePlayer and theta.steps == 5
    assert type(lam) is GradientAscent and lam.radius == 3.0
    assert isinstance(lam.optimizer, torch.optim.SGD) and lam.optimizer.param_groups[0]["lr"] == 0.2
    assert slacks.lr.item() == pytest.approx(0.01) and slacks.psi_steps == 7
    # another λ strategy, with its own settings only
    copt = ConstrainedOptimizer(
        Problem(1.0 - gmean()), torch.optim.SGD(model.parameters(), lr=0.1),
        **PRESETS["algorithm1"].optimizer_arguments({"multipliers": "swap_regret",
                                                     "multiplier_lr": 0.3}))
    assert type(copt.multipliers) is SwapRegret
    assert copt.multipliers.lr.item() == pytest.approx(0.3)
    # None (or absent): the preset's value, else the strategy's default
    for preset, lr in (("algorithm3", 0.3), ("lagrangian", 0.5)):
        copt = ConstrainedOptimizer(
            Problem(1.0 - gmean()), torch.optim.SGD(model.parameters(), lr=0.1),
            **PRESETS[preset].optimizer_arguments({"multiplier_lr": None}))
        assert copt.multipliers.lr.item() == pytest.approx(lr)
        assert type(_player(copt, "theta")) is GradientPlayer


def test_two_declarations_of_one_key_must_agree(monkeypatch):
    from fairgames.game.players import MULTIPLIER_PLAYERS, ConfigKey
    from fairgames.game.presets import registered_config_keys

    class Clash(GradientAscent):
        strategy = "clash"
        config_keys = (ConfigKey("radius", float, 5.0),)

    assert registered_config_keys()["radius"][1] == [GradientAscent, ExponentiatedGradient,
                                                     FollowTheLeader]
    monkeypatch.setitem(MULTIPLIER_PLAYERS, "clash", Clash)
    with pytest.raises(ValueError, match="'radius' is declared by .*GradientAscent.* as float "
                                         r"\(default None\) and by .*Clash.* \(default 5.0\)"):
        registered_config_keys()
