"""Solutions: snapshots, the stochastic model, best iterate, LP shrinking, save / load.

Independent references: member rates computed with numpy from the members' own predictions,
constrained mixtures solved by ``scipy.optimize.linprog`` (interior point, not the code's
HiGHS simplex path), hand-ranked best-iterate cases, and binomial bounds for sampling.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import torch
from scipy.optimize import linprog

from fairgames.data import make_synthetic
from fairgames.game.solutions import (
    SnapshotRecorder,
    StochasticModel,
    best_iterate,
    evaluate_candidates,
    load_solution,
    save_solution,
    shrink_lp,
)
from fairgames.game.solutions.lp import _reduce_support
from fairgames.rates import (
    RateEvaluator,
    error_rate,
    gmean,
    group,
    no_host_sync,
    true_negative_rate,
    true_positive_rate,
)

EPS = 0.05          # TPR-parity slack of the finite-hypothesis problem


@pytest.fixture(scope="module")
def data():
    ds = make_synthetic(n=4000, d=4, seed=0).train
    return ds.features, ds.labels, ds.groups["group"], ds.group_names["group"]


def _hypotheses(d: int, h: int = 10, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(h, d, generator=gen), 0.5 * torch.randn(h, generator=gen)


def _numpy_rates(weight: np.ndarray, bias: np.ndarray, x, y, g) -> dict[str, np.ndarray]:
    """Error and per-group TPR of linear classifiers ``[H, D]``, ``[H]`` with numpy."""
    pred = (x.numpy() @ weight.T + bias).T > 0                  # [H, N]
    yn, gn = y.numpy().astype(bool), g.numpy()
    out = {"error": (pred != yn).mean(1)}
    for k in (0, 1):
        out[f"tpr{k}"] = pred[:, yn & (gn == k)].mean(1)
        out[f"tnr{k}"] = (~pred[:, ~yn & (gn == k)]).mean(1)
    out["tpr"] = pred[:, yn].mean(1)
    out["tnr"] = (~pred[:, ~yn]).mean(1)
    return out


def _parity(names):
    t0 = true_positive_rate(group("group", names[0]))
    t1 = true_positive_rate(group("group", names[1]))
    return [(t0 - t1 <= EPS).named("gap+"), (t1 - t0 <= EPS).named("gap-")]


def _set(model: torch.nn.Linear, w: torch.Tensor, b: torch.Tensor) -> None:
    with torch.no_grad():
        model.weight.copy_(w[None])
        model.bias.copy_(b.reshape(1))


# --------------------------------------------------------------------------- the LP problem
def test_game_mixture_of_snapshots_reaches_the_lp_optimum_and_lp_shrinks_it(data):
    """min error s.t. |TPR_0 − TPR_1| ≤ 0.05 over the mixtures of 10 fixed classifiers.

    The optimum is an LP over the hypotheses' rates (numpy + scipy interior point). A game —
    θ best-responds over the finite class, λ does projected gradient ascent on the true rates —
    is recorded by the SnapshotRecorder; the uniform mixture of its snapshots, evaluated
    through the evaluator's mixture path, is within 0.02 of the LP objective and violates the
    constraints by at most 0.02 (the game's O(1/√T) gap at T = 3000). LP shrinking of the
    snapshots keeps at most m + 1 = 3 members, reaches the LP optimum to 1e-6 and is feasible.
    """
    x, y, g, names = data
    w_h, b_h = _hypotheses(x.shape[1])
    rates = _numpy_rates(w_h.numpy(), b_h.numpy(), x, y, g)
    err, gap = rates["error"], rates["tpr0"] - rates["tpr1"]
    cons_np = np.stack([gap - EPS, -gap - EPS], 1)                     # [H, 2], ≤ 0
    ref = linprog(err, A_ub=cons_np.T, b_ub=np.zeros(2), A_eq=np.ones((1, err.size)),
                  b_eq=[1.0], bounds=(0, None), method="highs-ipm")
    assert ref.status == 0
    assert ref.fun < err[np.abs(gap) <= EPS].min() - 0.05    # mixing genuinely helps here
    assert err.min() < ref.fun - 0.05                        # and the constraint binds

    model = torch.nn.Linear(x.shape[1], 1)
    rec = SnapshotRecorder(model, every=1, capacity=300, strategy="uniform_stride")
    lam = np.zeros(2)
    for t in range(3000):
        h = int(np.argmin(err + cons_np @ lam))          # θ: best response on the true L2
        _set(model, w_h[h], b_h[h])
        rec.step()
        lam = np.clip(lam + cons_np[h] / np.sqrt(t + 1), 0.0, 10.0)   # λ: projected OGD
    mix = rec.to_stochastic_model()
    assert 150 <= len(mix) <= 300

    objective, constraints = error_rate(), _parity(names)
    ev = RateEvaluator([objective, *constraints])
    batch_kw = {"groups": {"group": g}, "group_values": {"group": names}}
    values = ev.evaluate_split([mix.batch(x, y, **batch_kw)])
    assert float(objective.evaluate(values)) <= ref.fun + 0.02
    assert max(float(c.value(values)) for c in constraints) <= 0.02

    cand = evaluate_candidates(mix, objective, constraints, x, y, **batch_kw)
    # Per-member values agree with numpy on the member's own classifier.
    member_w = mix.members["weight"][:, 0].numpy()
    member_b = mix.members["bias"][:, 0].numpy()
    own = _numpy_rates(member_w, member_b, x, y, g)
    np.testing.assert_allclose(cand.objectives, own["error"], atol=1e-12)
    np.testing.assert_allclose(cand.constraints[:, 0], own["tpr0"] - own["tpr1"] - EPS,
                               atol=1e-12)

    lp = shrink_lp(cand.objectives, cand.constraints, return_result=True)
    assert len(lp.support) <= len(constraints) + 1
    assert lp.feasible and lp.constraints.max() <= 1e-9
    assert abs(lp.objective - ref.fun) <= 1e-6
    shrunk = mix.subset(lp.weights)
    assert len(shrunk) == len(lp.support)
    shrunk_values = ev.evaluate_split([shrunk.batch(x, y, **batch_kw)])
    assert abs(float(objective.evaluate(shrunk_values)) - ref.fun) <= 1e-6
    assert max(float(c.value(shrunk_values)) for c in constraints) <= 1e-6


def test_mixture_rates_through_the_evaluator_are_weighted_member_rates(data):
    x, y, g, names = data
    w_h, b_h = _hypotheses(x.shape[1], h=5, seed=3)
    modules = []
    for w, b in zip(w_h, b_h, strict=True):
        m = torch.nn.Linear(x.shape[1], 1)
        _set(m, w, b)
        modules.append(m)
    weights = torch.tensor([0.1, 0.4, 0.2, 0.25, 0.05])
    mix = StochasticModel.from_modules(modules, weights)
    rates = _numpy_rates(w_h.numpy(), b_h.numpy(), x, y, g)
    q = weights.double().numpy()
    a, b = group("group", names[0]), group("group", names[1])
    exprs = {"error": error_rate(), "tpr0": true_positive_rate(a), "tpr1": true_positive_rate(b),
             "tnr0": true_negative_rate(a), "gmean": gmean()}
    ev = RateEvaluator(list(exprs.values()))
    values = ev.evaluate_split([mix.batch(x, y, groups={"group": g},
                                          group_values={"group": names})])
    for key in ("error", "tpr0", "tpr1", "tnr0"):
        assert float(exprs[key].evaluate(values)) == pytest.approx(q @ rates[key], abs=1e-6)
    # ψ of the averaged leaves (the mixture's G-mean), not the average of members' G-means.
    expected = np.sqrt((q @ rates["tpr"]) * (q @ rates["tnr"]))
    assert float(exprs["gmean"].evaluate(values)) == pytest.approx(expected, abs=1e-6)
    assert abs(expected - q @ np.sqrt(rates["tpr"] * rates["tnr"])) > 1e-4
    # predict_proba is the exact P(ŷ = 1) of the mixture.
    s = (x.numpy() @ w_h.numpy().T + b_h.numpy()).T
    np.testing.assert_allclose(mix.predict_proba(x).numpy(), q @ (s > 0), atol=1e-6)


def test_predict_samples_members_with_the_mixture_weights():
    torch.manual_seed(0)
    modules = [torch.nn.Linear(3, 1) for _ in range(4)]
    weights = torch.tensor([0.5, 0.3, 0.15, 0.05])
    mix = StochasticModel.from_modules(modules, weights)
    x = torch.randn(40_000, 3)
    scores, members = mix.sample_scores(x, torch.Generator().manual_seed(1))
    n = x.shape[0]
    freq = torch.bincount(members, minlength=4).double() / n
    bound = 5 * torch.sqrt(weights.double() * (1 - weights.double()) / n)   # 5 sigma
    assert torch.all((freq - weights.double()).abs() <= bound)
    all_scores = mix.scores(x)
    torch.testing.assert_close(scores, all_scores[members, torch.arange(n)])
    # Same seed, same draws; predictions are the drawn member's sign.
    again = mix.predict(x, torch.Generator().manual_seed(1))
    torch.testing.assert_close(again, (scores > 0).float())
    # One example repeated: the positive frequency matches predict_proba within 5 sigma.
    x1 = x[:1].expand(n, 3)
    p = float(mix.predict_proba(x[:1])[0])
    hits = float(mix.predict(x1, torch.Generator().manual_seed(2)).mean())
    assert abs(hits - p) <= 5 * np.sqrt(max(p * (1 - p), 1e-12) / n) + 1e-12


# --------------------------------------------------------------------------- best iterate
def test_best_iterate_prefers_the_best_feasible_candidate():
    obj = [0.10, 0.30, 0.20, 0.05]
    viol = [[0.20, -0.1], [-0.05, 0.0], [0.0, -0.2], [0.01, 0.0]]
    # Feasible: #1 (0.30) and #2 (0.20); #0 and #3 are better but infeasible.
    assert best_iterate(obj, viol) == 2
    # With a tolerance of 0.02, #3 (max violation 0.01) becomes feasible and wins.
    assert best_iterate(obj, viol, tolerance=0.02) == 3
    # No constraints: the lowest objective.
    assert best_iterate(obj, np.zeros((4, 0))) == 3


def test_best_iterate_rank_rule_when_none_is_feasible():
    obj = [0.1, 0.2, 0.3, 0.4]
    viol = [[0.5], [0.1], [0.05], [0.2]]
    # Ranks by hand: objective 1,2,3,4; violation 4,2,1,3; max 4,2,3,4 → #1.
    assert best_iterate(obj, viol) == 1
    # Max over constraints first: rows [0.5, 0], [0.0, 0.1], ... give the same violations.
    viol2 = [[0.5, -1.0], [0.0, 0.1], [0.05, 0.01], [-0.3, 0.2]]
    assert best_iterate(obj, viol2) == 1
    # A tie in the max rank is broken by the objective (not the index): objective ranks
    # 2,1,3 and violation ranks 1,2,3 give max ranks 2,2,3; #1 has the lower objective.
    assert best_iterate([0.2, 0.1, 0.3], [[0.1], [0.2], [0.3]]) == 1
    # Equal violations share the lower rank ("min"): violation ranks 2,2,1 and objective
    # ranks 1,2,3 give max ranks 2,2,3; the tie goes to the lower objective, #0.
    assert best_iterate([0.1, 0.2, 0.3], [[0.2], [0.2], [0.1]]) == 0
    # NaN objective ranks last, NaN violation counts as infinitely violated.
    assert best_iterate([float("nan"), 0.2, 0.3], [[0.0], [float("nan")], [0.0]]) == 2


def test_best_iterate_tfco_rank_rule_can_trade_feasibility():
    obj = [0.5, 0.1, 0.2]
    viol = [[0.0], [0.01], [0.3]]
    # Objective ranks 3,1,2; violation ranks 1,2,3 → max 3,2,3: TFCO's rule picks #1 ...
    assert best_iterate(obj, viol, rule="rank") == 1
    # ... while the default rule keeps the only feasible candidate.
    assert best_iterate(obj, viol) == 0
    with pytest.raises(ValueError, match="rule"):
        best_iterate(obj, viol, rule="best")
    with pytest.raises(ValueError, match=r"\[R, m\]"):
        best_iterate(obj, [[0.0], [0.0]])


# --------------------------------------------------------------------------- LP shrinking
@pytest.mark.parametrize("seed", range(6))
def test_shrink_lp_matches_an_independent_lp_with_at_most_m_plus_one_members(seed):
    rng = np.random.default_rng(seed)
    r, m = 40, 3
    f = rng.uniform(0, 1, r)
    g = rng.normal(0.2, 0.3, (r, m)) - 0.15 * f[:, None]   # low objective ⇒ more violation
    ref = linprog(f, A_ub=g.T, b_ub=np.full(m, 0.01), A_eq=np.ones((1, r)), b_eq=[1.0],
                  bounds=(0, None), method="highs-ipm")
    assert ref.status == 0
    res = shrink_lp(f, g, tolerance=0.01, return_result=True)
    assert res.feasible and np.all(g.T @ res.weights <= 0.01 + 1e-9)
    assert res.objective == pytest.approx(ref.fun, abs=1e-8)
    assert len(res.support) <= m + 1
    assert np.all(res.weights >= 0) and res.weights.sum() == pytest.approx(1.0, abs=1e-12)


def test_support_reduction_keeps_constraints_and_never_raises_the_objective():
    rng = np.random.default_rng(7)
    f, g = rng.uniform(size=25), rng.normal(size=(25, 4))
    w = np.full(25, 1 / 25)
    reduced = _reduce_support(w.copy(), f, g)
    assert np.count_nonzero(reduced) <= 5
    np.testing.assert_allclose(g.T @ reduced, g.T @ w, atol=1e-12)
    assert f @ reduced <= f @ w + 1e-12


def test_shrink_lp_infeasible_minimises_the_maximum_violation_with_a_warning():
    f = np.array([0.1, 0.2, 0.3])
    g = np.array([[0.3, 0.5], [0.5, 0.2], [0.4, 0.4]])           # every mixture violates
    # Independent: min_w max_j (gᵀw)_j over the simplex, as an LP in (w, s).
    ref = linprog(np.r_[0, 0, 0, 1.0], A_ub=np.c_[g.T, -np.ones(2)], b_ub=np.zeros(2),
                  A_eq=[[1, 1, 1, 0]], b_eq=[1.0], bounds=[(0, None)] * 3 + [(None, None)],
                  method="highs-ipm")
    with pytest.warns(RuntimeWarning, match="maximum violation"):
        res = shrink_lp(f, g, return_result=True)
    assert not res.feasible
    assert res.max_violation == pytest.approx(ref.fun, abs=1e-7)
    assert len(res.support) <= 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        one = shrink_lp([0.3, 0.1, 0.2], np.zeros((3, 0)))     # no constraint: a vertex
    np.testing.assert_array_equal(one, [0.0, 1.0, 0.0])
    with pytest.raises(ValueError, match="finite"):
        shrink_lp([0.1, float("nan")], [[0.0], [0.0]])


def test_shrink_lp_gives_infinite_candidates_no_weight_and_solves_the_rest():
    """A snapshot whose objective is +inf (KLD at p̂ = 0, the zero-initialised model) or
    whose constraint is +inf takes no weight; the others get the LP of the finite ones."""
    inf = float("inf")
    f = np.array([inf, 1.0, 0.0, 0.5, 0.2])
    g = np.array([[-1.0], [-1.0], [1.0], [0.5], [inf]])
    res = shrink_lp(f, g, return_result=True)
    expected = shrink_lp(f[1:4], g[1:4])
    np.testing.assert_allclose(res.weights, np.r_[0.0, expected, 0.0], atol=1e-12)
    np.testing.assert_allclose(res.weights[1:4], [0.5, 0.5, 0.0], atol=1e-9)   # f = 0.5, g = 0
    assert res.feasible and res.objective == pytest.approx(0.5)
    with pytest.raises(ValueError, match="every candidate"):
        shrink_lp([inf, inf], [[0.0], [0.0]])
    with pytest.raises(ValueError, match="-inf"):
        shrink_lp([0.1, -inf], [[0.0], [0.0]])


# --------------------------------------------------------------------------- snapshots
class _WithBuffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 1)
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)[:, 0] + self.count.to(x.dtype)


def _run(rec: SnapshotRecorder, model: _WithBuffer, steps: int) -> None:
    for _ in range(steps):
        with torch.no_grad():
            model.lin.bias.add_(1.0)
            model.count.add_(1)
        rec.step()


def test_snapshots_copy_parameters_and_buffers_at_the_right_steps():
    model = _WithBuffer()
    bias0 = float(model.lin.bias.detach())
    rec = SnapshotRecorder(model, every=3, capacity=100, offset="fixed")
    _run(rec, model, 30)
    assert rec.steps == list(range(3, 31, 3))
    state = rec.stacked()
    torch.testing.assert_close(state["count"], torch.arange(3, 31, 3))
    torch.testing.assert_close(state["lin.bias"][:, 0], bias0 + torch.arange(3, 31, 3).float())
    # The copies are copies: changing the model does not change them.
    with torch.no_grad():
        model.lin.bias.zero_()
    torch.testing.assert_close(rec.stacked()["lin.bias"], state["lin.bias"])


def _period_two_phases(rec: SnapshotRecorder, model: torch.nn.Linear, steps: int
                       ) -> np.ndarray:
    """Play a game whose iterate alternates θ = +1, −1, +1, ... every step; the phase (±1)
    each kept snapshot holds."""
    for t in range(steps):
        with torch.no_grad():
            model.weight.fill_(1.0 if t % 2 == 0 else -1.0)
        rec.step()
    return rec.stacked()["weight"].flatten().numpy()


@pytest.mark.parametrize("strategy", ["reservoir", "uniform_stride"])
def test_random_offsets_see_both_phases_of_a_period_two_game(strategy):
    model = torch.nn.Linear(1, 1, bias=False)
    # Today's stride: a snapshot every 10 steps lands on one phase only.
    fixed = SnapshotRecorder(model, every=10, capacity=64, strategy=strategy, offset="fixed")
    assert set(_period_two_phases(fixed, model, 2000)) == {-1.0}
    # A random step of each window: both phases, in shares Binomial(n, 1/2) over the kept
    # snapshots (checked at 5 sigma) — the same for every seed.
    for seed in range(3):
        rec = SnapshotRecorder(model, every=10, capacity=64, strategy=strategy, seed=seed)
        phases = _period_two_phases(rec, model, 2000)
        n = len(phases)
        assert n >= 32 and set(phases) == {-1.0, 1.0}
        assert abs((phases > 0).sum() - n / 2) <= 5 * np.sqrt(n / 4)


def test_random_offsets_take_one_seeded_step_in_each_window():
    model = _WithBuffer()
    a = SnapshotRecorder(model, every=5, capacity=100, seed=3)
    b = SnapshotRecorder(model, every=5, capacity=100, seed=3)
    c = SnapshotRecorder(model, every=5, capacity=100, seed=4)
    for _ in range(100):
        with torch.no_grad():
            model.count.add_(1)
        a.step(), b.step(), c.step()
    assert [(s - 1) // 5 for s in a.steps] == list(range(20))     # one in each window
    assert a.steps == b.steps and a.steps != c.steps
    # every step of a window is drawn (20 windows, 5 offsets: all seen with high odds)
    assert set(np.array(a.steps) % 5) == {0, 1, 2, 3, 4}
    torch.testing.assert_close(a.stacked()["count"], torch.tensor(a.steps))
    # the reservoir's own draws do not depend on the offsets: same seed, same slot choices
    r1 = SnapshotRecorder(model, every=1, capacity=4, seed=8)
    r2 = SnapshotRecorder(model, every=1, capacity=4, seed=8, offset="fixed")
    for _ in range(30):
        r1.step(), r2.step()
    assert r1.steps == r2.steps


def test_offset_is_part_of_the_recorders_state():
    model = _WithBuffer()
    rec = SnapshotRecorder(model, every=3, capacity=10)
    _run(rec, model, 7)
    with pytest.raises(ValueError, match="offset='random' but this recorder has "
                                         "offset='fixed'"):
        SnapshotRecorder(model, every=3, capacity=10, offset="fixed").load_state_dict(
            rec.state_dict())
    with pytest.raises(ValueError, match="offset must be one of"):
        SnapshotRecorder(model, every=3, capacity=10, offset="middle")


def test_reservoir_is_capped_seeded_and_uniform():
    model = _WithBuffer()
    a = SnapshotRecorder(model, every=1, capacity=8, seed=5)
    b = SnapshotRecorder(model, every=1, capacity=8, seed=5)
    c = SnapshotRecorder(model, every=1, capacity=8, seed=6)
    for _ in range(50):
        with torch.no_grad():
            model.count.add_(1)
        a.step(), b.step(), c.step()
    assert len(a) == 8 and a.steps == b.steps and a.steps != c.steps
    torch.testing.assert_close(a.stacked()["count"], torch.tensor(a.steps))
    # Inclusion probability of each of 40 offers is 8/40 (Vitter's algorithm R): counts over
    # 300 seeds are Binomial(300, 0.2), checked at 5 sigma.
    tiny = torch.nn.Linear(1, 1)
    counts = np.zeros(40)
    for seed in range(300):
        rec = SnapshotRecorder(tiny, every=1, capacity=8, seed=seed)
        for _ in range(40):
            rec.step()
        counts[np.array(rec.steps) - 1] += 1
    assert np.all(np.abs(counts - 60) <= 5 * np.sqrt(300 * 0.2 * 0.8))


def test_uniform_stride_keeps_an_evenly_spaced_budget():
    model = _WithBuffer()
    rec = SnapshotRecorder(model, every=2, capacity=10, strategy="uniform_stride",
                           offset="fixed")
    _run(rec, model, 200)                        # 100 offers
    steps = rec.steps
    assert 5 <= len(steps) <= 10 and steps[0] == 2
    spacing = int(np.diff(steps)[0])
    assert set(np.diff(steps)) == {spacing}        # evenly spaced ...
    assert steps[-1] > 200 - spacing               # ... over the whole run


@pytest.mark.parametrize("strategy", ["reservoir", "uniform_stride"])
def test_recorder_state_dict_round_trip_continues_identically(strategy):
    model_a, model_b = _WithBuffer(), _WithBuffer()
    model_b.load_state_dict(model_a.state_dict())
    a = SnapshotRecorder(model_a, every=2, capacity=6, strategy=strategy, seed=1)
    _run(a, model_a, 40)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    model_b.load_state_dict(model_a.state_dict())
    b = SnapshotRecorder(model_b, every=2, capacity=6, strategy=strategy, seed=99)
    b.load_state_dict(torch.load(buf, weights_only=True))
    _run(a, model_a, 40)
    _run(b, model_b, 40)
    assert a.steps == b.steps
    for name, t in a.stacked().items():
        torch.testing.assert_close(b.stacked()[name], t)


@pytest.mark.parametrize("strategy", ["reservoir", "uniform_stride"])
@pytest.mark.parametrize("every", [1, 3])
def test_recording_makes_no_host_sync(strategy, every):
    model = _WithBuffer()
    rec = SnapshotRecorder(model, every=every, capacity=4, strategy=strategy)
    with no_host_sync():
        _run(rec, model, 20)
    assert len(rec) >= 2


def test_recorder_rejects_bad_arguments():
    model = torch.nn.Linear(2, 1)
    with pytest.raises(ValueError, match="every"):
        SnapshotRecorder(model, every=0, capacity=2)
    with pytest.raises(ValueError, match="capacity"):
        SnapshotRecorder(model, every=1, capacity=0)
    with pytest.raises(ValueError, match="strategy"):
        SnapshotRecorder(model, every=1, capacity=2, strategy="fifo")
    with pytest.raises(ValueError, match="no snapshot"):
        SnapshotRecorder(model, every=1, capacity=2).stacked()


# --------------------------------------------------------------------------- the model
def test_vectorized_loop_factory_and_members_agree():
    torch.manual_seed(0)

    def factory() -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.BatchNorm1d(5),
                                   torch.nn.Tanh(), torch.nn.Linear(5, 1))

    modules = [factory() for _ in range(3)]
    for m in modules:                                  # non-trivial running statistics
        m.train()
        m(torch.randn(64, 3) * 2 + 1)
        m.eval()
    mix = StochasticModel.from_modules(modules)
    x = torch.randn(7, 3)
    expected = torch.stack([m(x)[:, 0] for m in modules]).detach()
    torch.testing.assert_close(mix.scores(x), expected)
    loop = StochasticModel(factory, mix.members, vectorize=False)
    torch.testing.assert_close(loop.scores(x), expected)
    torch.testing.assert_close(mix.member_scores(x, 2), expected[2])
    single = mix.member(1).eval()
    torch.testing.assert_close(single(x)[:, 0], expected[1])


def test_stochastic_model_rejects_bad_weights_and_states():
    modules = [torch.nn.Linear(2, 1) for _ in range(2)]
    mix = StochasticModel.from_modules(modules)
    with pytest.raises(ValueError, match="sum to 1"):
        StochasticModel(modules[0], mix.members, [0.5, 0.6])
    with pytest.raises(ValueError, match="non-negative"):
        StochasticModel(modules[0], mix.members, [1.5, -0.5])
    with pytest.raises(ValueError, match="shape"):
        StochasticModel(modules[0], mix.members, [1.0])
    with pytest.raises(ValueError, match="missing"):
        StochasticModel(torch.nn.Linear(2, 1, bias=False), {"bias": mix.members["bias"]})
    with pytest.raises(ValueError, match="shape"):
        StochasticModel(torch.nn.Linear(3, 1), mix.members)


# --------------------------------------------------------------------------- save / load
def test_save_load_round_trip_gives_identical_predictions(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    rec = SnapshotRecorder(model, every=1, capacity=5)
    for _ in range(5):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
        rec.step()
    mix = rec.to_stochastic_model(weights=torch.tensor([0.1, 0.2, 0.3, 0.2, 0.2]))
    path = tmp_path / "stochastic.pt"
    save_solution(path, mix, metadata={"split": "validation", "score": np.float64(0.5)})
    loaded, meta = load_solution(path, lambda: torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1)), with_metadata=True)
    assert meta == {"split": "validation", "score": 0.5}
    assert loaded.steps == mix.steps == [1, 2, 3, 4, 5]
    x = torch.randn(50, 3)
    torch.testing.assert_close(loaded.scores(x), mix.scores(x), rtol=0, atol=0)
    torch.testing.assert_close(loaded.predict(x, torch.Generator().manual_seed(3)),
                               mix.predict(x, torch.Generator().manual_seed(3)), rtol=0, atol=0)
    # Deterministic: the best member as a plain module.
    best = mix.member(2)
    save_solution(tmp_path / "det.pt", best)
    det = load_solution(tmp_path / "det.pt", model)
    assert isinstance(det, torch.nn.Sequential)
    torch.testing.assert_close(det(x), best(x), rtol=0, atol=0)
    with pytest.raises(ValueError, match="does not match"):
        load_solution(path, torch.nn.Linear(3, 1))
    torch.save({"weights": torch.ones(1)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a fairgames solution"):
        load_solution(tmp_path / "other.pt", model)
    with pytest.raises(TypeError, match="plain data"):
        save_solution(tmp_path / "bad.pt", mix, metadata={"x": object()})


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_recording_to_pinned_memory_and_mixture_evaluation():
    model = _WithBuffer().cuda()
    rec = SnapshotRecorder(model, every=1, capacity=4, device="cpu")
    assert rec.storage["lin.weight"].is_pinned()
    with no_host_sync():
        _run(rec, model, 10)
    mix = rec.to_stochastic_model().cuda()
    x = torch.randn(8, 2, device="cuda")
    assert mix.scores(x).shape == (len(rec), 8)
    torch.testing.assert_close(rec.stacked()["count"], torch.tensor(rec.steps))
