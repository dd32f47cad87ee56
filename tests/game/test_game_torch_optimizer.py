"""``ConstrainedOptimizer`` is a ``torch.optim.Optimizer``: closures, schedulers, checkpoints."""

from __future__ import annotations

import copy

import pytest
import torch

from fairgames.game import BestResponsePlayer, ConstrainedOptimizer, Player, Problem
from fairgames.rates import Batch, error_rate, group, true_positive_rate


def _problem() -> Problem:
    a, b = group("group", "0"), group("group", "1")
    return Problem(error_rate(), [(true_positive_rate(b) >= true_positive_rate(a) - 0.05)
                                  .named("tpr")])


def _game(preset: str = "lagrangian", **options):
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 1)
    copt = ConstrainedOptimizer(_problem(), torch.optim.SGD(model.parameters(), lr=0.1),
                                preset=preset, **options)
    return model, copt


def test_it_is_a_torch_optimizer_with_a_tagged_group_per_player():
    model, copt = _game(preset="algorithm3")
    assert isinstance(copt, torch.optim.Optimizer)
    tags = [g["player"] for g in copt.param_groups]
    assert tags == ["theta", "multipliers"]
    assert copt.param_groups[0] is copt.model_optimizer.param_groups[0]
    assert float(copt.param_groups[1]["lr"]) == pytest.approx(0.3)    # algorithm3's λ step


def test_added_parameter_groups_join_the_wrapped_optimizer():
    torch.manual_seed(0)
    model, head = torch.nn.Linear(5, 3), torch.nn.Linear(3, 1)
    copt = ConstrainedOptimizer(_problem(), torch.optim.SGD(model.parameters(), lr=0.1))
    copt.add_param_group({"params": head.parameters(), "lr": 0.01})
    assert len(copt.model_optimizer.param_groups) == 2
    assert [g["player"] for g in copt.param_groups] == ["theta", "theta", "multipliers"]
    assert copt.param_groups[1]["lr"] == 0.01


def test_a_closure_step_equals_the_hand_written_loop(synthetic, helpers):
    x, f = synthetic.features[:300], helpers.fields(synthetic, torch.arange(300))
    model_a, a = _game()
    model_b, b = _game()
    for _ in range(5):
        a.zero_grad()
        loss_a = a.lagrangian(Batch(scores=model_a(x)[:, 0], **f))
        loss_a.backward()
        a.step()

        def closure():
            b.zero_grad()
            loss = b.lagrangian(Batch(scores=model_b(x)[:, 0], **f))
            loss.backward()
            return loss

        loss_b = b.step(closure)
        assert torch.equal(loss_a, loss_b)
    assert torch.equal(a.weights()[1], b.weights()[1])
    assert torch.equal(model_a.weight, model_b.weight)


def test_step_lr_and_lambda_lr_drive_theta_and_the_multipliers(synthetic, helpers):
    x, f = synthetic.features[:300], helpers.fields(synthetic, torch.arange(300))
    model, copt = _game(multiplier_lr=0.4)
    sched = torch.optim.lr_scheduler.StepLR(copt, step_size=3, gamma=0.1)
    for _ in range(3):
        copt.step_batch(model, x, **f)
        sched.step()
    assert copt.model_optimizer.param_groups[0]["lr"] == pytest.approx(0.01)
    assert float(copt.multipliers.lr) == pytest.approx(0.04)

    # Per-group functions: θ decays as 1/(t+1), λ grows as 1 + t (a dual warm-up).
    model, copt = _game(multiplier_lr=0.4)
    sched = torch.optim.lr_scheduler.LambdaLR(copt, [lambda t: 1 / (t + 1), lambda t: 1 + t])
    lam_before = copt.weights()[1].clone()
    for _ in range(4):
        copt.step_batch(model, x, **f)
        sched.step()
    assert copt.model_optimizer.param_groups[0]["lr"] == pytest.approx(0.1 / 5)
    assert float(copt.multipliers.lr) == pytest.approx(0.4 * 5)
    assert not torch.equal(copt.weights()[1], lam_before)


def test_the_scheduled_step_size_is_what_the_multipliers_play(synthetic, helpers):
    x, f = synthetic.features[:300], helpers.fields(synthetic, torch.arange(300))
    model, copt = _game(multiplier_lr=1.0)
    copt.param_groups[1]["lr"].fill_(0.25)     # what a scheduler does to a tensor step size
    copt.step_batch(model, x, **f)
    gain = copt.last.rows_true
    expected = torch.clamp(0.25 * gain, min=0.0)   # λ₀ = 0, one projected ascent step
    torch.testing.assert_close(copt.weights()[1], expected)


def test_a_grad_scaler_passed_positionally_shows_the_fix(synthetic, helpers):
    x, f = synthetic.features[:64], helpers.fields(synthetic, torch.arange(64))
    model, copt = _game()
    copt.zero_grad()
    copt.lagrangian(Batch(scores=model(x)[:, 0], **f)).backward()
    scaler = torch.amp.GradScaler("cpu")
    with pytest.raises(TypeError, match=r"step\(scaler=scaler\)"):
        copt.step(scaler)


def test_a_best_response_player_needs_a_closure(synthetic, helpers):
    x, f = synthetic.features[:64], helpers.fields(synthetic, torch.arange(64))
    model, copt = _game(preset="algorithm1", theta=BestResponsePlayer(steps=2))
    copt.zero_grad()
    copt.lagrangian(Batch(scores=model(x)[:, 0], **f)).backward()
    with pytest.raises(RuntimeError, match="closure"):
        copt.step()


def test_a_format_1_checkpoint_is_refused_naming_both_versions(synthetic, helpers):
    x, f = synthetic.features[:64], helpers.fields(synthetic, torch.arange(64))
    model, copt = _game()
    copt.step_batch(model, x, **f)
    old = copy.deepcopy(copt.state_dict())
    old["format"] = 1
    with pytest.raises(ValueError, match=r"format 1.*format 2"):
        copt.load_state_dict(old)


def test_the_checkpoint_restores_scheduled_step_sizes(synthetic, helpers):
    x, f = synthetic.features[:64], helpers.fields(synthetic, torch.arange(64))
    model, copt = _game(multiplier_lr=0.4)
    copt.step_batch(model, x, **f)
    copt.multipliers.lr.fill_(0.1)
    state = copy.deepcopy(copt.state_dict())
    _, fresh = _game(multiplier_lr=0.4)
    fresh.load_state_dict(state)
    assert float(fresh.multipliers.lr) == pytest.approx(0.1)


class _Named(Player):
    def __init__(self, name: str, provides: tuple[str, ...] = ()) -> None:
        self.name, self.provides = name, provides

    def play(self, round) -> None:
        pass


def test_players_need_distinct_names_and_views():
    with pytest.raises(ValueError, match="own name"):
        _game(players=[_Named("multipliers")])
    with pytest.raises(ValueError, match="both provide 'weights'"):
        _game(players=[_Named("other", provides=("weights",))])
    with pytest.raises(TypeError, match="Player instances"):
        _game(players=[object()])


def test_step_hooks_run_around_the_game_step(synthetic, helpers):
    x, f = synthetic.features[:64], helpers.fields(synthetic, torch.arange(64))
    model, copt = _game()
    seen: list[tuple[str, int]] = []
    copt.register_step_pre_hook(lambda opt, args, kwargs: seen.append(("pre", opt.steps)))
    copt.register_step_post_hook(lambda opt, args, kwargs: seen.append(("post", opt.steps)))
    copt.step_batch(model, x, **f)
    copt.step_batch(model, x, **f)
    assert seen == [("pre", 0), ("post", 1), ("pre", 1), ("post", 2)]


@pytest.mark.parametrize("preset, options", [
    ("proxy_lagrangian", {}), ("lagrangian", {}),
    ("lagrangian", {"multipliers": "exponentiated_gradient"}),
    ("algorithm3", {"ratio_slacks": "num_den", "slack_lr": 0.001})])
def test_player_state_and_step_sizes_stay_in_place(synthetic, helpers, preset, options):
    """A CUDA graph replays a step on fixed storage: no player may rebind its tensors."""
    from fairgames.rates import fmeasure

    x, f = synthetic.features[:128], helpers.fields(synthetic, torch.arange(128))
    problem = _problem()
    if preset == "algorithm3":
        a, b = group("group", "0"), group("group", "1")
        problem = Problem(-fmeasure(), [fmeasure(b) >= fmeasure(a) - 0.02])
    model = torch.nn.Linear(5, 1)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1),
                                preset=preset, **options)
    copt.step_batch(model, x, **f)

    def storage() -> dict[str, int]:
        out = {}
        for p in copt.players:
            for k, v in p.state_dict().items():
                if isinstance(v, torch.Tensor):
                    live = getattr(p, k, None)
                    if isinstance(live, torch.Tensor):
                        out[f"{p.name}.{k}"] = live.data_ptr()
        return out

    before = storage()
    assert any(k.startswith("multipliers.") for k in before)
    for _ in range(3):
        copt.step_batch(model, x, **f)
    assert storage() == before


class _CountingSGD(torch.optim.SGD):
    """An SGD whose own ``zero_grad`` counts its calls (and zeroes as torch's does)."""

    calls = 0

    def zero_grad(self, set_to_none: bool = True) -> None:
        type(self).calls += 1
        super().zero_grad(set_to_none=set_to_none)


def test_zero_grad_matches_torchs_and_keeps_an_overriding_optimizers_own():
    model, copt = _game()
    for set_to_none in (True, False):
        model(torch.randn(4, 5)).sum().backward()
        copt.zero_grad(set_to_none=set_to_none)
        for p in model.parameters():      # torch's contract: None, or zeros in place
            assert p.grad is None if set_to_none else torch.equal(p.grad, torch.zeros_like(p))
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 1)
    copt = ConstrainedOptimizer(_problem(), _CountingSGD(model.parameters(), lr=0.1),
                                preset="lagrangian")
    model(torch.randn(4, 5)).sum().backward()
    copt.zero_grad()
    assert _CountingSGD.calls == 1 and all(p.grad is None for p in model.parameters())
