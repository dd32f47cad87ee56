"""The penalty λ-players (augmented Lagrangian, quadratic penalty) and the νPI multiplier
optimizer inside the game (issue 57): selectable by name, θ's loss formed at the penalty's
weights of the batch's surrogate rows, a step without host sync, checkpoints that resume bit
for bit, and the problems they cannot play refused with the remedy. Their update rules are
tested against cooper-optim in test_game_cooper_rules.py."""

from __future__ import annotations

import io

import pytest
import torch

from fairgames.data import MinibatchSampler
from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.game.players import AugmentedLagrangian, NuPI, QuadraticPenalty
from fairgames.rates import Batch, error_rate, group, kld, no_host_sync, true_positive_rate

STRATEGIES = {"augmented_lagrangian": {"multipliers": "augmented_lagrangian"},
              "quadratic_penalty": {"multipliers": "quadratic_penalty",
                                    "multiplier_options": {"growth": 1.02}},
              "nupi": {"preset": "lagrangian",
                       "multiplier_options": {"optimizer": NuPI, "kp": 1.0, "ki": 1.0}}}


def tpr(v: str):
    return true_positive_rate(group("group", v))


def tpr_parity(gap: float = 0.05):
    return [(tpr("1") >= tpr("0") - gap).named("gap_10"),
            (tpr("0") >= tpr("1") - gap).named("gap_01")]


def numpy_gap(model, ds) -> float:
    """|TPR_1 − TPR_0| of the model's hard predictions (numpy, the independent reference)."""
    with torch.no_grad():
        pred = (model(ds.features)[:, 0] > 0).numpy()
    y, g = ds.labels.numpy() == 1, ds.groups["group"].numpy()
    return abs(float(pred[y & (g == 1)].mean()) - float(pred[y & (g == 0)].mean()))


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_each_scheme_narrows_the_gap_the_unconstrained_model_leaves(synthetic, helpers, name):
    unconstrained, _ = helpers.train(Problem(error_rate()), synthetic, steps=300)
    model, copt = helpers.train(Problem(error_rate(), tpr_parity(0.05)), synthetic, steps=300,
                                **STRATEGIES[name])
    assert numpy_gap(unconstrained, synthetic) > 0.15
    assert numpy_gap(model, synthetic) < 0.08
    if name != "nupi":
        assert type(copt.multipliers).strategy == name


def test_theta_descends_the_lagrangian_at_the_penalty_weights(synthetic, helpers):
    """θ's gradient under the augmented Lagrangian is the plain Lagrangian's gradient at the
    multipliers [λ + ρ·g̃]₊ of the batch's surrogate rows g̃ (here λ = 0, so ρ·[g̃]₊): the
    rows' surrogate values come from a surrogate-payoff game's record of the same batch."""
    problem = Problem(error_rate(), tpr_parity(0.0))
    idx = torch.arange(512)
    x, fields = synthetic.features[idx], helpers.fields(synthetic, idx)

    def gradient(copt, model):
        copt.zero_grad()
        copt.lagrangian(Batch(scores=model(x)[:, 0], **fields)).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    torch.manual_seed(0)
    model = torch.nn.Linear(5, 1)
    al = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.0),
                              multipliers="augmented_lagrangian",
                              multiplier_options={"penalty": 3.0})
    shaped = gradient(al, model)          # θ does not move: every game reads the same θ
    # the surrogate rows of the batch: a surrogate-payoff λ-player's record
    probe = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.0),
                                 preset="spade")
    gradient(probe, model)
    probe.step()
    rows = probe.last.rows_surrogate
    weights = 3.0 * rows.clamp_min(0.0)
    assert weights.max() > 0             # the penalty acts (the hinge bound is loose)
    plain = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1),
                                 preset="lagrangian")
    plain.multipliers.load_state_dict({"lam": weights, "lr": torch.tensor(0.5)})
    torch.testing.assert_close(shaped, gradient(plain, model), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_a_step_makes_no_host_sync(synthetic, helpers, name):
    _no_sync_steps(synthetic, helpers, name, torch.device("cpu"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_a_cuda_step_makes_no_host_sync(synthetic, helpers, name):
    # no_host_sync() also sets torch.cuda.set_sync_debug_mode("error") on a GPU
    _no_sync_steps(synthetic, helpers, name, torch.device("cuda"))


def _no_sync_steps(synthetic, helpers, name: str, device: torch.device) -> None:
    model = torch.nn.Linear(5, 1).to(device)
    copt = ConstrainedOptimizer(Problem(error_rate(), tpr_parity(0.05)),
                                torch.optim.SGD(model.parameters(), lr=0.1),
                                **STRATEGIES[name])
    idx = torch.arange(256)
    f = helpers.fields(synthetic, idx)
    x = synthetic.features[idx].to(device)
    f = {**f, "labels": f["labels"].to(device),
         "groups": {"group": f["groups"]["group"].to(device)}}

    def step():
        copt.zero_grad()
        copt.lagrangian(Batch(scores=model(x)[:, 0], **f)).backward()
        copt.step()

    step()      # the first step compiles the evaluation plan (host-side, once)
    with no_host_sync():
        step()
        step()
    assert all(torch.isfinite(w).all() for w in copt.weights())


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_a_resumed_game_continues_bit_for_bit(synthetic, helpers, name):
    problem = Problem(error_rate(), tpr_parity(0.05))
    sampler = iter(MinibatchSampler(synthetic, batch_size=128, seed=3))
    batches = [next(sampler) for _ in range(30)]

    def make():
        torch.manual_seed(1)
        m = torch.nn.Linear(5, 1)
        return m, ConstrainedOptimizer(problem, torch.optim.SGD(m.parameters(), lr=0.1),
                                       **STRATEGIES[name])

    def run(m, c, idxs):
        for idx in idxs:
            c.step_batch(m, synthetic.features[idx], **helpers.fields(synthetic, idx))

    model, copt = make()
    run(model, copt, batches[:15])
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "copt": copt.state_dict()}, buf)
    buf.seek(0)
    saved = torch.load(buf, weights_only=False)
    run(model, copt, batches[15:])
    model2, copt2 = make()
    run(model2, copt2, batches[:3])          # another state, overwritten by the load
    model2.load_state_dict(saved["model"])
    copt2.load_state_dict(saved["copt"])
    run(model2, copt2, batches[15:])
    for p, q in zip(model.parameters(), model2.parameters(), strict=True):
        assert torch.equal(p, q)
    assert torch.equal(copt.last.multipliers, copt2.last.multipliers)


def test_problems_the_penalties_cannot_play_are_refused(synthetic):
    model = torch.nn.Linear(5, 1)
    with pytest.raises(ValueError, match="rows affine in the rates only"):
        ConstrainedOptimizer(Problem(kld(group("group", "0")), [error_rate() <= 0.3]),
                             torch.optim.SGD(model.parameters(), lr=0.1),
                             preset="algorithm2", multipliers="augmented_lagrangian")
    with pytest.raises(ValueError, match="play it with a gradient θ-player"):
        ConstrainedOptimizer(Problem(error_rate(), tpr_parity()),
                             torch.optim.SGD(model.parameters(), lr=0.1),
                             preset="algorithm1", multipliers="quadratic_penalty")
    with pytest.raises(ValueError, match="has no radius: its multipliers are unbounded"):
        ConstrainedOptimizer(Problem(error_rate(), tpr_parity()),
                             torch.optim.SGD(model.parameters(), lr=0.1), preset="lagrangian",
                             multipliers="augmented_lagrangian", radius=5.0)
    assert AugmentedLagrangian.config_keys == QuadraticPenalty.config_keys
