"""The λ-player's update rules against cooper-optim 1.0.1's on the same problem (issue 57):
a convex toy ``min ½‖θ − a‖² s.t. Aθ ≤ b`` with a dense constraint matrix, θ on SGD, the same
order of play (cooper's ``SimultaneousOptimizer``: both players step from θ_t), trajectories
equal to 1e-6 over 50 steps. κ is large, so the ℓ1 bound of Λ never binds (cooper projects on
λ ≥ 0 only)."""

from __future__ import annotations

import pytest
import torch

from fairgames.game.players import AugmentedLagrangian, GradientAscent, NuPI, QuadraticPenalty

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


def _ours_lagrangian(player: GradientAscent, steps: int = STEPS
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The same game with fairgames' λ-player: θ's SGD step on f + λᵀg at λ_t, then the
    player's update from the violations at θ_t (the optimizer's order)."""
    theta = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([theta], lr=THETA_LR)
    thetas, lams = [], []
    for _ in range(steps):
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


def _cooper_penalized(formulation, growth: float, rho0: float
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """θ, λ and ρ after each of STEPS steps of cooper: one constraint per row (so each row's
    dual step can be its own ρ), ``MultiplicativePenaltyCoefficientUpdater`` after each roll,
    the dual SGD's step of each row set to its ρ before the roll (the method of multipliers,
    λ ← [λ + ρ·g]₊); the quadratic penalty has no dual."""
    theta = torch.nn.Parameter(torch.zeros(3))
    pcs = cooper.penalty_coefficients
    with_lam = formulation is cooper.formulations.AugmentedLagrangian

    class Rows(cooper.ConstrainedMinimizationProblem):
        def __init__(self) -> None:
            super().__init__()
            for j in range(2):
                factors = {"penalty_coefficient": pcs.DensePenaltyCoefficient(
                    init=torch.tensor([rho0]))}
                if with_lam:
                    factors["multiplier"] = cooper.multipliers.DenseMultiplier(
                        num_constraints=1)
                setattr(self, f"c{j}", cooper.Constraint(cooper.ConstraintType.INEQUALITY,
                                                         formulation_type=formulation,
                                                         **factors))

        def compute_cmp_state(self, theta: torch.Tensor) -> cooper.CMPState:
            g = _violations(theta)
            return cooper.CMPState(loss=_objective(theta), observed_constraints={
                self.c0: cooper.ConstraintState(violation=g[:1]),
                self.c1: cooper.ConstraintState(violation=g[1:])})

    cmp = Rows()
    rows = [cmp.c0, cmp.c1]
    primal = torch.optim.SGD([theta], lr=THETA_LR)
    if with_lam:
        dual = torch.optim.SGD([{"params": [c.multiplier.weight]} for c in rows], lr=rho0,
                               maximize=True)
        opt = cooper.optim.SimultaneousOptimizer(cmp=cmp, primal_optimizers=primal,
                                                 dual_optimizers=dual)
    else:
        opt = cooper.optim.UnconstrainedOptimizer(cmp=cmp, primal_optimizers=primal)
    updater = pcs.MultiplicativePenaltyCoefficientUpdater(growth_factor=growth)
    out: tuple[list, list, list] = ([], [], [])
    for _ in range(STEPS):
        if with_lam:
            for group, c in zip(dual.param_groups, rows, strict=True):
                group["lr"] = float(c.penalty_coefficient.value)
        rolled = opt.roll(compute_cmp_state_kwargs={"theta": theta})
        updater.step(rolled.cmp_state.observed_constraints)
        out[0].append(theta.detach().clone())
        out[1].append(torch.cat([c.multiplier.weight.detach() for c in rows]) if with_lam
                      else torch.zeros(2))
        out[2].append(torch.cat([c.penalty_coefficient.value for c in rows]))
    return tuple(torch.stack(x) for x in out)


def _ours_penalized(player, steps: int = STEPS, theta_lr: float = THETA_LR
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same game with fairgames' penalty player: θ descends the Lagrangian at the
    player's θ-weights of this step's surrogate rows (here the rows themselves), then the
    player steps on the true rows (the optimizer's order)."""
    theta = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([theta], lr=theta_lr)
    out: tuple[list, list, list] = ([], [], [])
    for _ in range(steps):
        opt.zero_grad()
        g = _violations(theta)
        weights = player.theta_multipliers(player.weights()[1].clone(), g.detach())
        (_objective(theta) + (weights * g).sum()).backward()
        opt.step()
        player.update(g.detach())
        out[0].append(theta.detach().clone())
        out[1].append(player.weights()[1].clone())
        out[2].append(player.rho.clone())
    return tuple(torch.stack(x) for x in out)


@pytest.mark.parametrize("growth", [1.0, 1.05])
def test_augmented_lagrangian_is_coopers(growth):
    theirs = _cooper_penalized(cooper.formulations.AugmentedLagrangian, growth, 0.5)
    ours = _ours_penalized(AugmentedLagrangian(2, penalty=0.5, growth=growth))
    assert theirs[1].max() > 0.1 and (growth == 1.0 or theirs[2].max() > 0.6)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


@pytest.mark.parametrize("growth", [1.0, 1.1])
def test_quadratic_penalty_is_coopers(growth):
    theirs = _cooper_penalized(cooper.formulations.QuadraticPenalty, growth, 1.0)
    ours = _ours_penalized(QuadraticPenalty(2, penalty=1.0, growth=growth))
    assert growth == 1.0 or theirs[2].max() > 10.0         # ρ grows while a row is violated
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def _kkt_point() -> torch.Tensor:
    """The toy's solution by scipy's SLSQP (the independent reference)."""
    from scipy.optimize import minimize

    a, b, target = A.double().numpy(), B.double().numpy(), TARGET.double().numpy()
    res = minimize(lambda x: 0.5 * ((x - target) ** 2).sum(), x0=target * 0,
                   jac=lambda x: x - target, method="SLSQP", tol=1e-12,
                   constraints=[{"type": "ineq", "fun": lambda x: b - a @ x,
                                 "jac": lambda x: -a}])
    assert res.success
    return torch.tensor(res.x, dtype=torch.float32)


@pytest.mark.parametrize("make, tolerance", [
    (lambda: AugmentedLagrangian(2, penalty=1.0, growth=1.0), 1e-4),
    (lambda: GradientAscent(2, lr=LAM_LR, radius=1e6, optimizer=NuPI, kp=1.0, ki=1.0), 1e-4),
    # the penalty's iterate sits O(λ*/ρ) outside the feasible set; ρ grows (to ~200-300
    # here) until the violation is under penalty_tolerance, and θ's step must shrink with
    # 1/ρ to stay stable
    (lambda: QuadraticPenalty(2, penalty=1.0, growth=1.02, tolerance=0.003, restart=False),
     5e-3)])
def test_the_last_iterate_reaches_the_kkt_point(make, tolerance):
    player = make()
    if isinstance(player, GradientAscent):
        thetas = _ours_lagrangian(player, steps=400)[0]
    elif isinstance(player, QuadraticPenalty):
        thetas = _ours_penalized(player, steps=2000, theta_lr=0.003)[0]
    else:
        thetas = _ours_penalized(player, steps=400)[0]
    assert float((thetas[-1] - _kkt_point()).abs().max()) < tolerance
