"""The λ-player's update rules against cooper-optim 1.0.1's on the same problem (issue 57):
a convex toy ``min ½‖θ − a‖² s.t. Aθ ≤ b`` with a dense constraint matrix, θ on SGD, the same
order of play (cooper's ``SimultaneousOptimizer``: both players step from θ_t), trajectories
equal to 1e-6 over 50 steps. κ is large, so the ℓ1 bound of Λ never binds (cooper projects on
λ ≥ 0 only)."""

from __future__ import annotations

import pytest
import torch

from fairgames.game.players import GradientAscent, NuPI

cooper = pytest.importorskip("cooper")

STEPS, THETA_LR, LAM_LR = 50, 0.1, 0.2
A = torch.tensor([[1.0, 0.5, -0.3], [0.2, 1.0, 0.8]])
B = torch.tensor([0.2, -0.1])
TARGET = torch.tensor([1.0, 1.0, 0.5])        # infeasible: both rows bind at the optimum


def _objective(theta: torch.Tensor) -> torch.Tensor:
    return 0.5 * ((theta - TARGET) ** 2).sum()


def _violations(theta: torch.Tensor) -> torch.Tensor:
    return A @ theta - B


class _Toy(cooper.ConstrainedMinimizationProblem):
    def __init__(self, formulation=cooper.formulations.Lagrangian, **factors) -> None:
        super().__init__()
        self.constraint = cooper.Constraint(cooper.ConstraintType.INEQUALITY,
                                            formulation_type=formulation, **factors)

    def compute_cmp_state(self, theta: torch.Tensor) -> cooper.CMPState:
        return cooper.CMPState(loss=_objective(theta), observed_constraints={
            self.constraint: cooper.ConstraintState(violation=_violations(theta))})


def _cooper_lagrangian(dual: type, **dual_kw) -> tuple[torch.Tensor, torch.Tensor]:
    """θ and λ after each of STEPS simultaneous steps of cooper (θ SGD, λ ``dual``)."""
    theta = torch.nn.Parameter(torch.zeros(3))
    toy = _Toy(multiplier=cooper.multipliers.DenseMultiplier(num_constraints=2))
    opt = cooper.optim.SimultaneousOptimizer(
        cmp=toy, primal_optimizers=torch.optim.SGD([theta], lr=THETA_LR),
        dual_optimizers=dual(toy.dual_parameters(), lr=LAM_LR, maximize=True, **dual_kw))
    thetas, lams = [], []
    for _ in range(STEPS):
        opt.roll(compute_cmp_state_kwargs={"theta": theta})
        thetas.append(theta.detach().clone())
        lams.append(toy.constraint.multiplier.weight.detach().clone())
    return torch.stack(thetas), torch.stack(lams)


def _ours_lagrangian(player: GradientAscent) -> tuple[torch.Tensor, torch.Tensor]:
    """The same game with fairgames' λ-player: θ's SGD step on f + λᵀg at λ_t, then the
    player's update from the violations at θ_t (the optimizer's order)."""
    theta = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([theta], lr=THETA_LR)
    thetas, lams = [], []
    for _ in range(STEPS):
        opt.zero_grad()
        lam = player.weights()[1].clone()
        g = _violations(theta)
        (_objective(theta) + (lam * g).sum()).backward()
        opt.step()
        player.update(g.detach())
        thetas.append(theta.detach().clone())
        lams.append(player.weights()[1].clone())
    return torch.stack(thetas), torch.stack(lams)


@pytest.mark.parametrize("kp, ki, nu", [(2.0, 1.0, 0.3), (1.0, 1.0, 0.0), (0.0, 1.0, 0.0),
                                        (5.0, 0.5, 0.9)])
def test_nupi_is_coopers_nupi(kp, ki, nu):
    theirs = _cooper_lagrangian(cooper.optim.nuPI, Kp=kp, Ki=ki, ema_nu=nu)
    ours = _ours_lagrangian(GradientAscent(2, lr=LAM_LR, radius=1e6, optimizer=NuPI,
                                           kp=kp, ki=ki, nu=nu))
    assert theirs[1].max() > 0.1          # the constraints bind: λ moves
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_optimistic_lambda_is_nupi_with_unit_gains():
    """κ_p = κ_i = 1, ν = 0: from the second step on λ ← λ + η(2g_t − g_{t−1}) (Popov)."""
    player = GradientAscent(2, lr=LAM_LR, radius=1e6, optimizer=NuPI, kp=1.0, ki=1.0, nu=0.0)
    gains = torch.tensor([[0.3, 0.1], [0.2, 0.4], [0.5, 0.3], [0.1, 0.2]])
    expected = [LAM_LR * gains[0], None, None, None]
    expected[1] = expected[0] + LAM_LR * 2 * gains[1]            # cooper's ξ_0 = 0
    for t in (2, 3):
        expected[t] = expected[t - 1] + LAM_LR * (2 * gains[t] - gains[t - 1])
    for t, gain in enumerate(gains):
        player.update(gain)
        torch.testing.assert_close(player.weights()[1], expected[t])


def test_nupi_state_is_checkpointed_and_a_skipped_step_leaves_no_trace():
    def fresh():
        return GradientAscent(2, lr=LAM_LR, radius=1e6, optimizer=NuPI, kp=2.0, nu=0.5)

    a, b = fresh(), fresh()
    a.update(torch.tensor([0.3, 0.1]))
    a.update(torch.tensor([0.2, -0.1]), ok=torch.tensor(False))      # skipped
    b.load_state_dict(a.state_dict())
    for p in (a, b):
        p.update(torch.tensor([0.5, 0.4]))
    torch.testing.assert_close(a.weights()[1], b.weights()[1], atol=0, rtol=0)
    c = fresh()
    c.update(torch.tensor([0.3, 0.1]))
    c.update(torch.tensor([0.5, 0.4]))
    torch.testing.assert_close(a.weights()[1], c.weights()[1], atol=0, rtol=0)


def test_nupi_gains_without_nupi_are_refused():
    with pytest.raises(ValueError, match="gains of the νPI multiplier optimizer"):
        GradientAscent(2, kp=1.0)
    with pytest.raises(ValueError, match="νPI's nu must lie in"):
        NuPI([torch.nn.Parameter(torch.zeros(1))], lr=0.1, nu=1.0)
