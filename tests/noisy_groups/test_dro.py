"""The DRO player of paper 004: its projection, its reweighting, its checkpoint and the exact
TV-ball worst case, each against an independent reference (scipy)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import linprog, minimize

from fairgames.data import make_synthetic
from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.game.projections import project_tv_authors, project_tv_simplex
from fairgames.noisy_groups.dro import DROPlayer
from fairgames.noisy_groups.tv_ball import robust_values, tv_extreme_ratio, tv_max_linear
from fairgames.rates import Batch, error_rate, group, no_host_sync, true_positive_rate


def _instance(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    center = rng.random(n) * (rng.random(n) < 0.6)
    if center.sum() == 0:
        center[0] = 1.0
    return rng.normal(size=n) * 0.5, center / center.sum(), float(rng.random() * 0.8)


def _qp(x: np.ndarray, c: np.ndarray, r: float) -> np.ndarray:
    """argmin ½‖p − x‖² over {p >= 0, Σ p = 1, ‖p − c‖₁ <= r}, by SLSQP with e >= |p − c|."""
    n = len(x)
    cons = [{"type": "eq", "fun": lambda z: z[:n].sum() - 1},
            {"type": "ineq", "fun": lambda z: r - z[n:].sum()},
            {"type": "ineq", "fun": lambda z: z[n:] - (z[:n] - c)},
            {"type": "ineq", "fun": lambda z: z[n:] + (z[:n] - c)}]
    res = minimize(lambda z: 0.5 * ((z[:n] - x) ** 2).sum(), np.concatenate([c, np.zeros(n)]),
                   constraints=cons, bounds=[(0, None)] * (2 * n), method="SLSQP",
                   options={"ftol": 1e-14, "maxiter": 2000})
    assert res.success
    return res.x[:n]


def test_exact_projection_matches_a_scipy_qp_and_its_kkt_conditions():
    rng = np.random.default_rng(0)
    for _ in range(40):
        n = int(rng.integers(2, 12))
        x, c, half = _instance(rng, n)
        r = 2 * half
        p = project_tv_simplex(torch.tensor(x), torch.tensor(c), r).numpy()
        np.testing.assert_allclose(p, _qp(x, c, r), atol=1e-6)
        # feasibility, and KKT: p = max(0, c + S_μ(x + ν − c)) for some μ >= 0, ν
        assert p.min() >= 0 and abs(p.sum() - 1) < 1e-12 and np.abs(p - c).sum() <= r + 1e-12
        up, down = p > c + 1e-12, (p < c - 1e-12) & (p > 1e-12)
        shift = (p - x)[up | down]
        if up.any() and down.any():
            # up rows: p = x + ν − μ; down rows (above 0): p = x + ν + μ, so μ >= 0
            assert np.ptp((p - x)[up]) < 1e-9 and np.ptp((p - x)[down]) < 1e-9
            assert (p - x)[down][0] >= (p - x)[up][0] - 1e-9
        elif shift.size:
            assert np.ptp(shift) < 1e-9


def test_exact_projection_of_many_rows_at_once_keeps_sum_and_ball():
    g = torch.Generator().manual_seed(1)
    n = 5000
    c = torch.zeros(3, n, dtype=torch.float64)
    c[0, :1000], c[1, 1000:3000], c[2, 3000:] = 1 / 1000, 1 / 2000, 1 / 2000
    x = c + torch.randn(3, n, generator=g, dtype=torch.float64) / n
    gamma = torch.tensor([0.05, 0.2, 0.4], dtype=torch.float64)
    p = project_tv_simplex(x, c, 2 * gamma)
    assert torch.allclose(p.sum(1), torch.ones(3, dtype=torch.float64), atol=1e-10)
    assert ((p - c).abs().sum(1) <= 2 * gamma + 1e-10).all() and p.min() >= 0
    # a point already in the set is its own projection
    assert torch.allclose(project_tv_simplex(c, c, 2 * gamma), c, atol=1e-14)


def test_authors_projection_is_the_l1_ball_around_the_center_clamped():
    rng = np.random.default_rng(2)
    for _ in range(20):
        x, c, half = _instance(rng, 8)
        p = project_tv_authors(torch.tensor(x), torch.tensor(c), 2 * half).numpy()
        # reference: Euclidean projection of d = x − c onto the ℓ₁ ball (SLSQP), then + c, ≥ 0
        np.testing.assert_allclose(p, np.maximum(_l1_ball_qp(x - c, 2 * half) + c, 0),
                                   atol=1e-6)


def _l1_ball_qp(d: np.ndarray, r: float) -> np.ndarray:
    """argmin ½‖z − d‖² over ‖z‖₁ <= r, by SLSQP with e >= |z|."""
    n = len(d)
    res = minimize(lambda z: 0.5 * ((z[:n] - d) ** 2).sum(), np.zeros(2 * n),
                   constraints=[{"type": "ineq", "fun": lambda z: r - z[n:].sum()},
                                {"type": "ineq", "fun": lambda z: z[n:] - z[:n]},
                                {"type": "ineq", "fun": lambda z: z[n:] + z[:n]}],
                   method="SLSQP", options={"ftol": 1e-14, "maxiter": 2000})
    return res.x[:n]


def _lp_ratio(u: np.ndarray, w: np.ndarray, c: np.ndarray, gamma: float) -> float:
    """max u·p / w·p over the TV ball ∩ simplex, by Charnes–Cooper: y = t·p, w·y = 1,
    variables (y, e, t) with e >= |y − t c|, Σ e <= 2γ t, Σ y = t."""
    n = len(u)
    cost = np.concatenate([-u, np.zeros(n), [0.0]])
    eye = np.eye(n)
    a_ub = np.vstack([np.hstack([eye, -eye, -c[:, None]]), np.hstack([-eye, -eye, c[:, None]]),
                      np.concatenate([np.zeros(n), np.ones(n), [-2 * gamma]])[None]])
    a_eq = np.vstack([np.concatenate([w, np.zeros(n), [0.0]]),
                      np.concatenate([np.ones(n), np.zeros(n), [-1.0]])])
    res = linprog(cost, A_ub=a_ub, b_ub=np.zeros(2 * n + 1), A_eq=a_eq, b_eq=[1.0, 0.0],
                  bounds=[(0, None)] * (2 * n + 1), method="highs")
    assert res.status == 0
    return -res.fun


def test_tv_maxima_match_linear_programs():
    rng = np.random.default_rng(3)
    for _ in range(40):
        n = int(rng.integers(3, 15))
        _, c, gamma = _instance(rng, n)
        v = rng.normal(size=n)
        lp = linprog(-np.concatenate([v, np.zeros(n)]),
                     A_ub=np.vstack([np.hstack([np.eye(n), -np.eye(n)]),
                                     np.hstack([-np.eye(n), -np.eye(n)]),
                                     np.concatenate([np.zeros(n), np.ones(n)])[None]]),
                     b_ub=np.concatenate([c, -c, [2 * gamma]]),
                     A_eq=np.concatenate([np.ones(n), np.zeros(n)])[None], b_eq=[1.0],
                     bounds=[(0, None)] * (2 * n), method="highs")
        assert abs(float(tv_max_linear(torch.tensor(v), torch.tensor(c), gamma))
                   + lp.fun) < 1e-9
        # a rate: w a subset (e.g. Y = 1), u = w · event (e.g. ŷ = 1), both directions
        w = (rng.random(n) < 0.6).astype(float)
        w[np.argmax(c)] = 1.0                     # the subset has mass under p̂
        u = w * (rng.random(n) < 0.5)
        for sign in (1.0, -1.0):
            got = float(tv_extreme_ratio(torch.tensor(u), torch.tensor(w), torch.tensor(c),
                                         gamma, maximize=sign > 0))
            assert abs(got - sign * _lp_ratio(sign * u, w, c, gamma)) < 1e-7


def test_robust_tpr_constraint_is_the_closed_form():
    # noisy group b: TP mass a, FN mass b_; worst TPR_b = max(a − γ, 0)/(a + b_)
    scores = torch.tensor([1.0, 1.0, -1.0, 1.0, -1.0, 1.0, 1.0, -1.0])
    labels = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    codes = torch.tensor([0, 0, 0, 1, 1, 1, 1, 1])
    con = (true_positive_rate(group("g", "b")) >= true_positive_rate() - 0.05).named("eo_b")
    tpr_all = 4 / 7                                  # rows 0, 1, 3, 6 of the 7 positives
    for gamma in (0.0, 0.1, 0.3, 0.5):
        a, b_ = 2 / 5, 2 / 5                       # p̂_b: 1/5 per row of group b
        worst = max(a - gamma, 0.0) / (a + b_)
        got = robust_values({"eo_b": con}, "g", [0.0, gamma], scores, labels,
                            {"g": codes}, {"g": ["a", "b"]})["eo_b"]
        assert got == pytest.approx(tpr_all - worst - 0.05, abs=1e-12)


def _problem(names: list[str], tol: float = 0.05) -> Problem:
    tpr = [(true_positive_rate(group("group", v)) >= true_positive_rate() - tol).named(f"eo{v}")
           for v in names]
    return Problem(error_rate(), tpr)


@pytest.fixture(scope="module")
def train():
    return make_synthetic(n=600, d=4, seed=0).train


def _batch(train, scores, ids=None):
    ids = torch.arange(len(train)) if ids is None else ids
    return Batch(scores=scores, labels=train.labels[ids],
                 groups={"group": train.groups["group"][ids]}, group_values=train.group_names,
                 example_ids=ids)


def test_at_the_center_the_reweighted_rates_and_theta_gradient_are_todays(train):
    problem = _problem(train.group_names["group"])
    dro = DROPlayer("group", train.groups["group"], gamma=0.2)
    dro.bind_device(torch.device("cpu"))
    torch.manual_seed(0)
    model = torch.nn.Linear(train.num_features, 1)
    ev = problem.make_evaluator()
    grads, values = [], []
    for transform in (False, True):
        model.zero_grad()
        s = model(train.features)[:, 0]
        b = _batch(train, s)
        b = dro.transform(b) if transform else b
        leaf = ev(b, update=False)
        loss = sum(c.expression.evaluate(leaf, "upper") for c in problem.constraints.values())
        loss.backward()
        values.append(torch.stack([c.expression.evaluate(leaf) for c in
                                   problem.constraints.values()]))
        grads.append(model.weight.grad.clone())
    torch.testing.assert_close(values[0], values[1], atol=1e-6, rtol=0)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-5)


def test_moved_mass_reweights_group_rates_and_leaves_overall_rates_unweighted(train):
    dro = DROPlayer("group", train.groups["group"], gamma=0.3)
    dro.bind_device(torch.device("cpu"))
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        dro.p.copy_(project_tv_simplex(dro.center + torch.rand(dro.center.shape, generator=g)
                                       / 50, dro.center, dro.radius))
    scores = torch.randn(len(train), generator=g)
    b = _batch(train, scores)
    tb = dro.transform(b)
    overall = true_positive_rate()
    tpr1 = true_positive_rate(group("group", "1"))
    from fairgames.rates import RateEvaluator
    ev = RateEvaluator([overall, tpr1])
    got, plain = ev(tb, update=False), ev(b, update=False)
    assert float(overall.evaluate(got)) == pytest.approx(float(overall.evaluate(plain)), abs=1e-6)
    y, yhat, p = train.labels.double(), (scores > 0).double(), dro.p[1].detach().double()
    want = float((p * y * yhat).sum() / (p * y).sum())      # the p̃-weighted TPR
    assert float(tpr1.evaluate(got)) == pytest.approx(want, abs=1e-6)
    assert abs(want - float(tpr1.evaluate(plain))) > 1e-3   # it did move


def _game(train, steps, optimizer="adam", projection="exact", ascent="unscaled"):
    torch.manual_seed(0)
    model = torch.nn.Linear(train.num_features, 1)
    dro = DROPlayer("group", train.groups["group"], gamma=[0.1, 0.2], lr=0.05,
                    optimizer=optimizer, steps=2, projection=projection, ascent=ascent)
    copt = ConstrainedOptimizer(_problem(train.group_names["group"]),
                                torch.optim.SGD(model.parameters(), 0.1), preset="lagrangian",
                                players=[dro])
    for _ in range(steps):
        copt.step_batch(model, train.features, labels=train.labels,
                        groups={"group": train.groups["group"]},
                        group_values=train.group_names, example_ids=torch.arange(len(train)))
    return model, copt, dro


@pytest.mark.parametrize("optimizer,projection", [("adam", "exact"), ("sgd", "authors")])
def test_dro_ascends_stays_in_its_set_and_resumes_bit_for_bit(train, optimizer, projection):
    model, copt, dro = _game(train, 6, optimizer, projection)
    assert (dro.distance() > 0).any()                  # the adversary moved
    assert (dro.distance() <= torch.tensor([0.1, 0.2]) + 1e-6).all()
    if projection == "exact":
        torch.testing.assert_close(dro.p.detach().sum(1), torch.ones(2))
    state, mstate = copt.state_dict(), {k: v.clone() for k, v in model.state_dict().items()}
    for _ in range(3):
        copt.step_batch(model, train.features, labels=train.labels,
                        groups={"group": train.groups["group"]},
                        group_values=train.group_names, example_ids=torch.arange(len(train)))
    model2, copt2, dro2 = _game(train, 0, optimizer, projection)
    model2.load_state_dict(mstate)
    copt2.load_state_dict(state)
    for _ in range(3):
        copt2.step_batch(model2, train.features, labels=train.labels,
                         groups={"group": train.groups["group"]},
                         group_values=train.group_names, example_ids=torch.arange(len(train)))
    assert torch.equal(dro.p, dro2.p) and torch.equal(dro.m2, dro2.m2)
    assert torch.equal(model.weight, model2.weight)


@pytest.mark.parametrize("ascent", ["unscaled", "scaled"])
def test_a_dro_step_makes_no_host_sync(train, ascent):
    model, copt, _ = _game(train, 1, ascent=ascent)
    ids = torch.arange(len(train))
    with no_host_sync():
        for _ in range(2):
            copt.step_batch(model, train.features, labels=train.labels,
                            groups={"group": train.groups["group"]},
                            group_values=train.group_names, example_ids=ids)


def test_clear_errors(train):
    codes = train.groups["group"]
    with pytest.raises(ValueError, match="no training row"):
        DROPlayer("group", torch.zeros_like(codes), gamma=[0.1, 0.1])
    with pytest.raises(ValueError, match=r"gamma must lie in \[0, 1\]"):
        DROPlayer("group", codes, gamma=1.5)
    dro = DROPlayer("group", codes, gamma=0.1)
    dro.bind_device(torch.device("cpu"))
    bad = torch.arange(len(train)) + 5
    with pytest.raises(ValueError, match="example id is out of range"):
        dro.transform(_batch(train, torch.zeros(len(train)), torch.arange(len(train)))
                      .__class__(scores=torch.zeros(len(train)), labels=train.labels,
                                 groups={"group": codes}, group_values=train.group_names,
                                 example_ids=bad))
    with pytest.raises(ValueError, match="needs example_ids"):
        dro.transform(Batch(scores=torch.zeros(len(train)), labels=train.labels,
                            groups={"group": codes}, group_values=train.group_names))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_dro_step_makes_no_host_sync(train):
    # no_host_sync() also sets torch.cuda.set_sync_debug_mode("error") on a GPU
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = torch.nn.Linear(train.num_features, 1).to(dev)
    dro = DROPlayer("group", train.groups["group"], gamma=[0.1, 0.2], lr=0.05)
    copt = ConstrainedOptimizer(_problem(train.group_names["group"]),
                                torch.optim.SGD(model.parameters(), 0.1), preset="lagrangian",
                                players=[dro])
    x, fields = train.features.to(dev), {
        "labels": train.labels.to(dev), "groups": {"group": train.groups["group"].to(dev)},
        "group_values": train.group_names, "example_ids": torch.arange(len(train), device=dev)}
    copt.step_batch(model, x, **fields)        # compiles the evaluation plan (host-side, once)
    with no_host_sync():
        for _ in range(2):
            copt.step_batch(model, x, **fields)
    assert (dro.distance().cpu() <= torch.tensor([0.1, 0.2]) + 1e-6).all()


def test_a_skipped_step_leaves_the_adversary_and_its_moments_as_they_were(train):
    model, copt, dro = _game(train, 3)
    before = [t.clone() for t in (dro.p.detach(), dro.m1, dro.m2, dro.t)]
    bad = train.features.clone()
    bad[0] = float("nan")                          # a NaN score: the game skips the step
    copt.step_batch(model, bad, labels=train.labels, groups={"group": train.groups["group"]},
                    group_values=train.group_names, example_ids=torch.arange(len(train)))
    after = (dro.p.detach(), dro.m1, dro.m2, dro.t)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    with pytest.raises(Exception, match="non-finite"):
        copt.check()


def test_robust_values_of_a_mixture_at_zero_radius_are_its_expected_rates():
    g = torch.Generator().manual_seed(5)
    n, r = 200, 3
    scores, q = torch.randn(r, n, generator=g), torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    labels = (torch.rand(n, generator=g) < 0.5).float()
    codes = torch.randint(0, 2, (n,), generator=g)
    con = (true_positive_rate(group("g", "b")) >= true_positive_rate() - 0.05).named("eo")
    got = robust_values({"eo": con}, "g", [0.0, 0.0], scores, labels, {"g": codes},
                        {"g": ["a", "b"]}, mixture_weights=q)["eo"]
    y, b = labels > 0, codes == 1

    def tpr(s, mask):
        return float(((s > 0) & y & mask).sum().double() / (y & mask).sum().double())

    want = sum(float(q[i]) * (tpr(scores[i], torch.ones(n, dtype=torch.bool))
                              - tpr(scores[i], b)) for i in range(r)) - 0.05
    assert got == pytest.approx(want, abs=1e-12)
    # and a positive radius can only make it worse
    worse = robust_values({"eo": con}, "g", [0.0, 0.2], scores, labels, {"g": codes},
                          {"g": ["a", "b"]}, mixture_weights=q)["eo"]
    assert worse > got


def _stall_game(train, ascent, steps=8):
    """A model that meets the noisy-group constraints (tolerance 0.3) where the TV ball
    (γ = 0.45) holds a p̃ that breaks them: at λ = 0 only an ascent that does not vanish with
    λ can find that p̃."""
    torch.manual_seed(0)
    model = torch.nn.Linear(train.num_features, 1)
    dro = DROPlayer("group", train.groups["group"], gamma=0.45, lr=0.05, ascent=ascent)
    copt = ConstrainedOptimizer(_problem(train.group_names["group"], tol=0.3),
                                torch.optim.SGD(model.parameters(), 1e-3), preset="lagrangian",
                                players=[dro])
    ids = torch.arange(len(train))
    copt.step_batch(model, train.features, labels=train.labels,
                    groups={"group": train.groups["group"]},
                    group_values=train.group_names, example_ids=ids)
    first = copt.last.constraints_true.clone()
    for _ in range(steps - 1):
        copt.step_batch(model, train.features, labels=train.labels,
                        groups={"group": train.groups["group"]},
                        group_values=train.group_names, example_ids=ids)
    return first, copt, dro


def test_the_unscaled_ascent_leaves_the_center_at_zero_multipliers(train):
    first, copt, dro = _stall_game(train, "unscaled")
    assert (first <= 0).all()                  # the noisy-group constraints held at the start
    assert (dro.distance() > 0.05).all()        # p̃ moved away from p̂ ...
    assert (copt.weights()[1] > 0).any()        # ... and the robust violation raised λ
    # the paper's λ-scaled step stalls at p̂ with λ = 0 on the same game
    first, copt, dro = _stall_game(train, "scaled")
    assert (first <= 0).all()
    assert (dro.distance() < 1e-6).all() and (copt.weights()[1] == 0).all()


def test_the_unscaled_direction_is_the_gradient_of_the_constraint_rows(train):
    """One step's direction equals autograd of Σ_r (upper surrogate of row r) at p̂ through
    an independent evaluator, whatever λ is."""
    _, copt, dro = _stall_game(train, "unscaled", steps=1)
    with torch.no_grad():
        dro.p.copy_(dro.center)
    torch.manual_seed(1)
    scores = torch.randn(len(train))
    dro.transform(_batch(train, scores))
    got, dro._grad = dro._grad, None
    problem = _problem(train.group_names["group"], tol=0.3)
    p = dro.p.detach().clone().requires_grad_(True)
    b = _batch(train, scores)
    member = (p[:, b.example_ids] * dro.scale[:, None]).T
    leaf = problem.make_evaluator()(
        Batch(scores=scores, labels=b.labels, groups={"group": member},
              group_values=b.group_values), update=False)
    rows = sum(c.expression.evaluate(leaf, "upper") for c in problem.constraints.values())
    (want,) = torch.autograd.grad(rows, p)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


def test_the_unscaled_ascent_is_a_config_choice_with_a_clear_error(train):
    with pytest.raises(ValueError, match="DRO ascent must be one of"):
        DROPlayer("group", train.groups["group"], gamma=0.1, ascent="lambda")


def test_unscaled_ascent_reads_linearised_ratios_and_refuses_ratio_slacks(train):
    from fairgames.rates import precision
    problem = Problem(error_rate(), [precision(group("group", "1")) >= 0.6])
    model = torch.nn.Linear(train.num_features, 1)
    dro = DROPlayer("group", train.groups["group"], gamma=0.1)
    ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), 0.1),
                         preset="lagrangian", players=[dro])       # linearised ratios
    dro.transform(_batch(train, torch.randn(len(train))))
    assert dro._grad is not None and dro._grad[1].abs().sum() > 0 and (dro._grad[0] == 0).all()
    with pytest.raises(ValueError, match="ratio-slack rows"):
        ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), 0.1),
                             preset="lagrangian", ratio_slacks="gradient", slack_lr=0.001,
                             players=[DROPlayer("group", train.groups["group"], gamma=0.1)])
