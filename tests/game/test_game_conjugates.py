"""Slack best responses: closed forms of ∇ψ* against scipy's numerical argmin on the box.

References are independent of the code under test: ``scipy.optimize.minimize`` (L-BFGS-B,
several starts) plus a dense grid for the two-argument means, ``minimize_scalar`` for KLD, and
numpy formulas for the objectives. A closed form must reach the numerical minimum (never
worse than it by more than 1e-9); the generic solvers must match the closed forms.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize as so
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import xlogy

from fairgames.game.conjugates import (
    CLOSED_FORMS,
    box_argmin,
    closed_form,
    kld_argmin,
    psi_linear_argmin,
)
from fairgames.rates import (
    KLD,
    Psi,
    geometric_mean,
    harmonic_mean,
    no_host_sync,
    root_mean_square,
)

SETTINGS = settings(deadline=None, derandomize=True, max_examples=40)
GRID = np.linspace(0.0, 1.0, 201)
U1, U2 = np.meshgrid(GRID, GRID, indexing="ij")


def _mean_np(name: str, u1: np.ndarray, u2: np.ndarray) -> np.ndarray:
    u1, u2 = np.asarray(u1, float), np.asarray(u2, float)
    if name == "geometric_mean2":
        return np.sqrt(np.maximum(u1 * u2, 0.0))
    if name == "harmonic_mean2":
        s = u1 + u2
        return np.where(s > 0, 2 * u1 * u2 / np.where(s > 0, s, 1.0), 0.0)
    return np.sqrt((u1 * u1 + u2 * u2) / 2)


def _numerical_min2(name: str, c: float, mu: np.ndarray) -> float:
    """min over [0,1]² of c·ψ(u) + ⟨mu, u⟩: the best of multi-start L-BFGS-B and a grid."""
    def f(x: np.ndarray) -> float:
        return float(c * _mean_np(name, x[0], x[1]) + mu @ x)

    best = float((c * _mean_np(name, U1, U2) + mu[0] * U1 + mu[1] * U2).min())
    for x0 in [(0.5, 0.5), (0.95, 0.95), (0.05, 0.95), (0.95, 0.05), (0.05, 0.05)]:
        r = so.minimize(f, np.array(x0), bounds=[(0, 1), (0, 1)], method="L-BFGS-B")
        best = min(best, float(r.fun))
    return best


def _kld_np(p: float, q: float) -> float:
    q = float(np.clip(q, 0.0, 1.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(xlogy(p, p) - xlogy(p, q) + xlogy(1 - p, 1 - p) - xlogy(1 - p, 1 - q))


MEANS = [(geometric_mean(2), -1), (harmonic_mean(2), -1), (root_mean_square(2), 1)]
mu_entry = st.one_of(st.floats(-4.0, 4.0), st.sampled_from([0.0, 0.5, -0.5, 1e-3, -1e-3]))
magnitude = st.floats(0.05, 4.0)


@pytest.mark.parametrize(("psi", "sign"), MEANS, ids=lambda v: getattr(v, "name", str(v)))
@SETTINGS
@given(c=magnitude, m1=mu_entry, m2=mu_entry)
def test_two_argument_closed_forms_reach_the_numerical_minimum(psi, sign, c, m1, m2):
    coef = sign * c
    mu = np.array([m1, m2])
    xi = psi_linear_argmin(psi, coef, torch.tensor(mu, dtype=torch.float64)).numpy()
    assert xi.shape == (2,) and np.all((xi >= 0) & (xi <= 1))
    value = float(coef * _mean_np(psi.name, xi[0], xi[1]) + mu @ xi)
    assert value <= _numerical_min2(psi.name, coef, mu) + 1e-9
    # The generic solvers (different methods, no closed form) find the same minimum: the
    # ellipsoid method ("auto" for two arguments) and projected gradient steps.
    for solver, tol in (("auto", 1e-5), ("projected_gradient", 1e-4)):
        xg = psi_linear_argmin(psi, coef, torch.tensor(mu, dtype=torch.float64),
                               method="generic", solver=solver).numpy()
        assert float(coef * _mean_np(psi.name, xg[0], xg[1]) + mu @ xg) <= value + tol, solver


@SETTINGS
@given(c=magnitude, mu=st.one_of(st.floats(-6.0, 6.0), st.just(0.0)),
       p=st.one_of(st.floats(0.0, 1.0), st.sampled_from([0.0, 1.0])))
def test_kld_closed_form_equals_scipy_argmin(c, mu, p):
    q = psi_linear_argmin(KLD, c, torch.tensor([mu], dtype=torch.float64),
                          fixed={0: torch.tensor(p, dtype=torch.float64)}).numpy()
    assert q.shape == (1,) and 0.0 <= q[0] <= 1.0

    def f(x: float) -> float:
        return c * _kld_np(p, x) + mu * x

    r = so.minimize_scalar(f, bounds=(0.0, 1.0), method="bounded", options={"xatol": 1e-12})
    reference = min(f(r.x), f(0.0), f(1.0))
    assert f(q[0]) <= reference + 1e-9
    if 0.0 < p < 1.0:   # strictly convex: the argmin itself is unique
        assert abs(q[0] - r.x) < 1e-4
    qg = psi_linear_argmin(KLD, c, torch.tensor([mu], dtype=torch.float64),
                           fixed={0: torch.tensor(p, dtype=torch.float64)}, method="generic")
    assert f(float(qg[0])) <= f(q[0]) + 1e-9
    qp = psi_linear_argmin(KLD, c, torch.tensor([mu], dtype=torch.float64),
                           fixed={0: torch.tensor(p, dtype=torch.float64)}, method="generic",
                           solver="projected_gradient")
    assert f(float(qp[0])) <= f(q[0]) + 1e-6


def test_kld_closed_form_special_cases_match_hand_derivations():
    # p = 1: KLD = −log q, so q* = c/μ for μ > c, else 1. p = 0: q* = 1 + c/μ for μ < −c.
    c = torch.tensor(1.0, dtype=torch.float64)
    got = kld_argmin(c, torch.tensor([4.0, 0.5, -4.0, -0.5], dtype=torch.float64),
                     torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64))
    torch.testing.assert_close(got, torch.tensor([0.25, 1.0, 0.75, 0.0], dtype=torch.float64))
    # μ = 0: no pull away from p.
    p = torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)
    torch.testing.assert_close(kld_argmin(c, torch.zeros(3, dtype=torch.float64), p), p)


def test_lemma1_gradient_of_the_conjugate_for_the_rms():
    # For c = 1 and −μ = λ inside the region where the optimum is interior to a face,
    # ξ* = ∇ψ*(λ) satisfies λ ∈ ∂ψ(ξ*) on the free coordinates (Fenchel–Young, Lemma 1).
    lam = torch.tensor([1.2, 0.3], dtype=torch.float64)
    xi = psi_linear_argmin(root_mean_square(2), 1.0, -lam)
    v = xi.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(root_mean_square(2)(v[0], v[1]), v)
    assert xi[0] == 1.0 and 0.0 < xi[1] < 1.0
    torch.testing.assert_close(g[1], lam[1])      # stationarity on the free coordinate
    assert g[0] <= lam[0]                          # the bound u1 ≤ 1 is active


def test_batched_and_tensor_coefficients_match_elementwise_calls():
    gen = torch.Generator().manual_seed(0)
    mu = torch.randn(5, 3, 2, generator=gen, dtype=torch.float64)
    coef = -torch.rand(5, 3, generator=gen, dtype=torch.float64) - 0.1
    batched = psi_linear_argmin(geometric_mean(2), coef, mu)
    assert batched.shape == mu.shape
    for i in range(5):
        for j in range(3):
            one = psi_linear_argmin(geometric_mean(2), float(coef[i, j]), mu[i, j])
            torch.testing.assert_close(batched[i, j], one)
    # A tensor coefficient of zero (a multiplier at 0) leaves a linear problem: a vertex.
    zero = psi_linear_argmin(harmonic_mean(2), torch.zeros(()), torch.tensor([0.3, -0.2]))
    torch.testing.assert_close(zero, torch.tensor([0.0, 1.0]))


@pytest.mark.parametrize("method", ["auto", "generic"])
def test_no_host_sync_in_best_responses(method):
    gen = torch.Generator().manual_seed(1)
    mu = torch.randn(16, 2, generator=gen)
    p = torch.rand(16, generator=gen)
    lam = torch.rand(16, generator=gen)
    with no_host_sync():
        for psi, sign in MEANS:
            psi_linear_argmin(psi, float(sign), mu, method=method, steps=20)
            psi_linear_argmin(psi, sign * lam, mu, method=method, steps=20)
        psi_linear_argmin(KLD, lam, mu[:, :1], fixed={0: p}, method=method, steps=20)


def test_generic_solver_under_no_grad_and_inference_mode_leaves_graphs_alone():
    mu = torch.tensor([-0.3, 0.8], requires_grad=True)
    expected = psi_linear_argmin(root_mean_square(2), 1.0, mu.detach())
    with torch.no_grad():
        a = psi_linear_argmin(root_mean_square(2), 1.0, mu, method="generic")
    with torch.inference_mode():
        b = psi_linear_argmin(root_mean_square(2), 1.0, mu.detach().clone(), method="generic")
    torch.testing.assert_close(a, expected, atol=1e-4, rtol=0)
    torch.testing.assert_close(b, expected, atol=1e-4, rtol=0)
    assert not a.requires_grad and mu.grad is None


def _square_fn(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * x


def test_generic_solver_on_a_custom_psi_matches_scipy_and_uses_conjugate_argmax():
    # ψ(x, y) = softplus(x − y) + x²: convex, no closed form registered.
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.softplus(x - y) + x * x

    psi = Psi("custom_softplus", fn, 2, "convex", (0, 0), ((-1.0, 2.0), (0.0, 3.0)))
    assert closed_form(psi) is None
    mu = np.array([0.4, -0.7])
    for solver in ("ellipsoid", "projected_gradient"):
        x = psi_linear_argmin(psi, 2.0, torch.tensor(mu, dtype=torch.float64), solver=solver,
                              steps=200).numpy()

        def f(z: np.ndarray) -> float:
            return float(2.0 * (np.logaddexp(0.0, z[0] - z[1]) + z[0] ** 2) + mu @ z)

        r = so.minimize(f, np.array([0.5, 1.5]), bounds=psi.domain, method="L-BFGS-B")
        assert f(x) <= r.fun + 1e-6
    # A user-provided ∇ψ* is used for convex ψ with a float coefficient:
    # ψ(x) = x²/2 on [0, 1] has ∇ψ*(λ) = clip(λ, 0, 1).
    calls = []

    def conj(lam: torch.Tensor) -> torch.Tensor:
        calls.append(lam)
        return lam.clamp(0.0, 1.0)

    quad = Psi("half_square", _square_fn, 1, "convex", (1,), ((0.0, 1.0),), conj)
    xi = psi_linear_argmin(quad, 2.0, torch.tensor([-1.0]))
    torch.testing.assert_close(xi, torch.tensor([0.5]))           # argmin x² − x = 1/2
    assert len(calls) == 1
    generic = psi_linear_argmin(quad, 2.0, torch.tensor([-1.0]), method="generic")
    torch.testing.assert_close(generic, xi, atol=1e-5, rtol=0)


def test_box_argmin_matches_a_projected_quadratic():
    # Accuracy is in the objective: a value gap δ means a distance of about √δ here.
    target = torch.tensor([[0.3, 1.7], [-0.4, 0.5]], dtype=torch.float64)

    def f(z: torch.Tensor) -> torch.Tensor:
        return ((z - target) ** 2).sum(-1)

    x = box_argmin(f, [0.0, 0.0], [1.0, 1.0], batch_shape=(2,), dtype=torch.float64)
    assert torch.all(f(x) <= f(target.clamp(0.0, 1.0)) + 1e-8)
    torch.testing.assert_close(x, target.clamp(0.0, 1.0), atol=1e-4, rtol=0)


def test_registry_is_keyed_by_psi_name_and_domain():
    assert {"geometric_mean2", "harmonic_mean2", "root_mean_square2", "kld"} <= set(CLOSED_FORMS)
    assert closed_form(geometric_mean(2)) is not None
    assert closed_form(KLD, free=(1,)) is not None
    assert closed_form(KLD) is None              # both arguments free: generic solver
    other_box = Psi("geometric_mean2", geometric_mean(2).fn, 2, "concave", (1, 1),
                    ((0.0, 2.0), (0.0, 1.0)))
    assert closed_form(other_box) is None
    with pytest.raises(ValueError, match="no closed-form"):
        psi_linear_argmin(KLD, 1.0, torch.zeros(2), method="closed_form")
    # Both KLD arguments free still solve (generic), here to p = p̂ = the pull's balance point.
    both = psi_linear_argmin(KLD, 1.0, torch.zeros(2, dtype=torch.float64))
    assert abs(float(both[0] - both[1])) < 1e-4


def test_bad_inputs_raise_clear_errors():
    mu = torch.zeros(2)
    with pytest.raises(ValueError, match="concave.*coefficient < 0"):
        psi_linear_argmin(geometric_mean(2), 1.0, mu)
    with pytest.raises(ValueError, match="convex.*coefficient > 0"):
        psi_linear_argmin(root_mean_square(2), -1.0, mu)
    none = Psi("wiggle", lambda x: torch.sin(x), 1, "none", (0,), ((0.0, 1.0),))
    with pytest.raises(ValueError, match="neither convex nor concave"):
        psi_linear_argmin(none, 1.0, torch.zeros(1))
    with pytest.raises(ValueError, match=r"shape \[\.\.\., 1\]"):
        psi_linear_argmin(KLD, 1.0, mu, fixed={0: torch.tensor(0.5)})
    with pytest.raises(ValueError, match="out of range"):
        psi_linear_argmin(KLD, 1.0, torch.zeros(1), fixed={2: torch.tensor(0.5)})
    with pytest.raises(ValueError, match="all arguments"):
        psi_linear_argmin(KLD, 1.0, torch.zeros(0), fixed={0: 0.5, 1: 0.5})
    with pytest.raises(TypeError, match="floating-point"):
        psi_linear_argmin(geometric_mean(2), -1.0, torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="steps"):
        psi_linear_argmin(geometric_mean(2), -1.0, mu, method="generic", steps=0)


def test_generic_solver_in_six_dimensions_matches_scipy():
    # No closed form for six arguments; "auto" takes projected gradient steps beyond n = 4.
    psi = root_mean_square(6)
    assert closed_form(psi) is None
    rng = np.random.default_rng(4)
    for _ in range(5):
        mu = rng.uniform(-1.0, 1.0, 6)

        def f(x: np.ndarray, mu: np.ndarray = mu) -> float:
            return float(1.5 * np.sqrt(np.mean(x * x)) + mu @ x)

        x = psi_linear_argmin(psi, 1.5, torch.tensor(mu, dtype=torch.float64)).numpy()
        ref = min(so.minimize(f, np.full(6, s), bounds=[(0, 1)] * 6, method="L-BFGS-B").fun
                  for s in (0.1, 0.5, 0.9))
        assert np.all((x >= 0) & (x <= 1)) and f(x) <= ref + 1e-6
