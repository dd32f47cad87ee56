"""Multiplier players and projections against independent references (numpy, scipy)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from fairgames.game import (
    DualContext,
    ExponentiatedGradient,
    FollowTheLeader,
    GradientAscent,
    SwapRegret,
    project_l1_ball_nonnegative,
    project_simplex,
)
from fairgames.rates import no_host_sync

vectors = st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=12)


def _reference_projection(x: np.ndarray, radius: float) -> np.ndarray:
    """argmin ‖λ − x‖² over λ ≥ 0, Σλ ≤ radius by bisection on the KKT threshold τ ≥ 0."""
    pos = np.maximum(x, 0)
    if pos.sum() <= radius:
        return pos
    lo, hi = 0.0, float(pos.max())
    for _ in range(200):
        tau = 0.5 * (lo + hi)
        lo, hi = (tau, hi) if np.maximum(x - tau, 0).sum() > radius else (lo, tau)
    return np.maximum(x - 0.5 * (lo + hi), 0)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(vectors, st.floats(0.1, 10))
def test_l1_ball_projection_matches_a_bisection_reference(x, radius):
    got = project_l1_ball_nonnegative(torch.tensor(x, dtype=torch.float64), radius).numpy()
    np.testing.assert_allclose(got, _reference_projection(np.array(x), radius), atol=1e-9)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(vectors)
def test_simplex_projection_is_the_constrained_minimiser(x):
    x = np.array(x)
    got = project_simplex(torch.tensor(x, dtype=torch.float64)).numpy()
    res = minimize(lambda v: ((v - x) ** 2).sum(), np.full(len(x), 1 / len(x)),
                   jac=lambda v: 2 * (v - x), bounds=[(0, None)] * len(x),
                   constraints=[{"type": "eq", "fun": lambda v: v.sum() - 1}], method="SLSQP",
                   options={"ftol": 1e-12, "maxiter": 500})
    np.testing.assert_allclose(got, res.x, atol=1e-5)


def test_projection_makes_no_host_sync():
    x = torch.randn(50)
    with no_host_sync():
        project_l1_ball_nonnegative(x, 1.0)
        project_simplex(x)


def _swap_reference(q: np.ndarray, v: np.ndarray, gain: np.ndarray, lr: float,
                    floor: float) -> np.ndarray:
    """Cotter et al. 2019 Alg. 2 / TFCO: multiplicative update of the left-stochastic matrix."""
    delta = np.concatenate([[0.0], gain])
    q = q * np.exp(lr * np.outer(delta, v))
    q = np.maximum(q / q.sum(0), floor)
    return q / q.sum(0)


def _stationary(q: np.ndarray) -> np.ndarray:
    w, vecs = np.linalg.eig(q)
    v = np.real(vecs[:, np.argmin(np.abs(w - 1))])
    return v / v.sum()


@pytest.mark.parametrize("method,rows", [("squaring", 3), ("power", 3), ("squaring", 20),
                                         ("tree", 1), ("tree", 2), ("auto", 2)])
def test_swap_regret_follows_the_multiplicative_update_and_its_stationary_distribution(
        method, rows):
    rng = np.random.default_rng(0)
    player = SwapRegret(rows, lr=0.7, method=method, power_iterations=200,
                        dtype=torch.float64)
    q = player.q.numpy().copy()
    v = player.v.numpy().copy()
    assert v[0] > 0.99                          # starts with the objective's weight near 1
    for _ in range(25):
        gain = rng.normal(0.1, 0.3, rows)
        player.update(torch.tensor(gain))
        q = _swap_reference(q, v, gain, 0.7, 1e-3 / (rows + 1))
        v = _stationary(q)
        np.testing.assert_allclose(player.q.numpy(), q, atol=1e-10)
        np.testing.assert_allclose(player.v.numpy(), v, atol=1e-7)
    omega, lam = player.weights()
    assert float(omega + lam.sum()) == pytest.approx(1.0)
    # Persistent violations move the weight from the objective to the constraints.
    start = float(player.saturation())
    for _ in range(200):
        player.update(torch.full((rows,), 0.2, dtype=torch.float64))
    assert float(player.saturation()) > max(0.5, start + 0.2)


def test_exponentiated_gradient_is_a_softmax_with_a_slack_coordinate():
    player = ExponentiatedGradient(3, lr=0.5, radius=2.0, initial=0.1)
    gains = [np.array([0.3, -0.1, 0.0]), np.array([0.2, 0.2, -0.4])]
    for g in gains:
        player.update(torch.tensor(g, dtype=torch.float32))
    theta = np.log(0.1 / (2.0 - 0.3)) + 0.5 * sum(gains)
    expected = 2.0 * np.exp(theta) / (1 + np.exp(theta).sum())
    np.testing.assert_allclose(player.weights()[1].numpy(), expected, rtol=1e-5)
    assert float(player.weights()[1].sum()) < 2.0


def test_follow_the_leader_plays_the_best_vertex_of_the_running_mean():
    player = FollowTheLeader(3, radius=5.0)

    def ctx(u):
        return DualContext(torch.tensor(u), torch.zeros(0), lambda *a: None, False)

    for u in ([0.1, -0.2, 0.0], [0.1, 0.5, -0.1], [-0.4, 0.0, 0.0]):
        player.follow(ctx(u))
    # Mean rows: [-0.067, 0.1, -0.033] → all mass κ on row 1.
    np.testing.assert_allclose(player.weights()[1].numpy(), [0.0, 5.0, 0.0])
    player.follow(ctx([-3.0, -3.0, -3.0]))
    np.testing.assert_allclose(player.weights()[1].numpy(), [0.0, 0.0, 0.0])   # none violated


@pytest.mark.parametrize("make", [
    lambda: GradientAscent(3, lr=0.5, radius=1.0),
    lambda: GradientAscent(3, radius=4.0, optimizer=lambda p: torch.optim.SGD(
        p, lr=0.2, momentum=0.9, maximize=True)),
    lambda: ExponentiatedGradient(3),
    lambda: SwapRegret(3),
])
def test_masked_updates_and_state_round_trip(make):
    a, b = make(), make()
    g = torch.tensor([0.3, -0.2, 0.1])
    a.update(g)
    before = {k: (v.clone() if isinstance(v, torch.Tensor) else v)
              for k, v in a.state_dict().items()}
    a.update(g * 5, ok=torch.tensor(False))          # a skipped step changes nothing
    for k, v in a.state_dict().items():
        if isinstance(v, torch.Tensor):
            assert torch.equal(v, before[k]), k
    b.load_state_dict(a.state_dict())
    for _ in range(3):
        a.update(g)
        b.update(g)
    assert torch.equal(a.weights()[1], b.weights()[1])
    # Every Lagrangian player stays in Λ = {λ ≥ 0, ‖λ‖₁ ≤ κ}.
    lam = a.weights()[1]
    assert bool((lam >= 0).all())
    if hasattr(a, "radius"):
        assert float(lam.sum()) <= a.radius + 1e-6


def test_bad_player_options_raise():
    with pytest.raises(ValueError, match="maximize"):
        GradientAscent(2, optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
    with pytest.raises(ValueError, match="radius"):
        GradientAscent(2, radius=0.0)
    with pytest.raises(ValueError, match="shape"):
        GradientAscent(2).update(torch.zeros(3))
    with pytest.raises(ValueError, match="method"):
        SwapRegret(2, method="eig")


def _grid_argmin(fn, n: int = 401) -> np.ndarray:
    t = np.linspace(0.0, 1.0, n)
    u, v = np.meshgrid(t, t, indexing="ij")
    values = fn(u, v)
    i = np.unravel_index(np.argmin(values), values.shape)
    return np.array([u[i], v[i]])


def test_psi_slacks_best_respond_and_step_by_gradient():
    from fairgames.game import Problem, SlackPlayer
    from fairgames.rates import gmean

    terms = Problem(1.0 - gmean()).terms        # rows ξ_k − R_k ≤ 0 (ξ below the rates)
    lam, omega = torch.tensor([0.7, 0.2]), torch.tensor(1.0)
    leaves, none = torch.tensor([0.6, 0.8]), torch.zeros(0)
    # Best response: argmin over [0, 1]² of ω(1 − √(ξ₁ξ₂)) + λ·ξ (a brute-force grid).
    xi = SlackPlayer(terms).respond(omega, lam, none, leaves, none).numpy()
    ref = _grid_argmin(lambda u, v: 1 - np.sqrt(u * v) + 0.7 * u + 0.2 * v)
    np.testing.assert_allclose(xi, ref, atol=3e-3)
    # OGD: the first step plays the slacks' start (the rates), then moves by −η ∂L/∂ξ.
    player = SlackPlayer(terms, psi="gradient", lr=0.1)
    used = player.respond(omega, lam, none, leaves, none)
    np.testing.assert_allclose(used.numpy(), leaves.numpy())
    x = leaves.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(1 - torch.sqrt(x[0] * x[1]) + lam @ x, x)
    np.testing.assert_allclose(player.slacks.numpy(), (leaves - 0.1 * grad).numpy(), atol=1e-6)
