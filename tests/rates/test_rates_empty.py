"""Empty and tiny subsets in a training batch, finite bound gradients, and undefined ratios.

A subset is empty exactly when its weight is 0 (or it has no row): a tiny weight is not
empty. An empty subset's leaf reads its running rate estimate (before any observation, the
batch's rate of the same event on the subset's label / baseline part), gives θ no gradient,
and is counted in ``empty_subsets``."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score, precision_score

import fairgames.rates as R
from fairgames.rates import Batch, ExactEvaluator, GroupTable, RateEvaluator, group

NAMES = ["a", "b"]


def tiny_batch(weight_b: float, dtype=torch.float32, soft=False, requires_grad=False):
    """Group "b" has two positives, both predicted positive, at weight ``weight_b`` each."""
    s = torch.tensor([1.0, -1.0, 2.0, 0.5, 3.0, -2.0], dtype=dtype, requires_grad=requires_grad)
    y = torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0, 0.0], dtype=dtype)
    g = torch.tensor([0, 0, 0, 1, 1, 0])
    w = torch.tensor([1.0, 1.0, 1.0, weight_b, weight_b, 1.0], dtype=dtype)
    groups = {"g": torch.nn.functional.one_hot(g, 2).to(dtype)} if soft else {"g": g}
    return Batch(scores=s, labels=y, weights=w, groups=groups, group_values={"g": NAMES})


@pytest.mark.parametrize("denominator", ["batch", "running"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("soft", [False, True], ids=["fused", "general"])
@pytest.mark.parametrize("weight_b", [1e-9, 1e-20, 1.0])
def test_a_tiny_weight_is_not_empty(denominator, dtype, soft, weight_b):
    exprs = [R.true_positive_rate(group("g", "b")), R.error_rate(group("g", "b")),
             R.true_positive_rate(group("g", "a"))]
    ev = RateEvaluator(exprs, denominator=denominator).train()
    batch = tiny_batch(weight_b, dtype, soft)
    exact = ev.evaluate_split([batch]).true
    torch.testing.assert_close(exact, torch.tensor([1.0, 0.0, 0.5], dtype=torch.float64))
    for _ in range(3):
        v = ev(batch)
        torch.testing.assert_close(v.true.double(), exact, rtol=1e-6, atol=1e-6)
        assert int(v.empty_subsets) == 0


def group_b_empty(seed: int, n: int = 32, requires_grad: bool = False) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    s = (3 * torch.randn(n, generator=gen)).requires_grad_(requires_grad)
    y = (torch.rand(n, generator=gen) < 0.5).float()
    return Batch(scores=s, labels=y, groups={"g": torch.zeros(n, dtype=torch.long)},
                 group_values={"g": NAMES})


def with_b(seed: int, n: int = 32) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    return Batch(scores=3 * torch.randn(n, generator=gen),
                 labels=(torch.rand(n, generator=gen) < 0.5).float(),
                 groups={"g": torch.randint(0, 2, (n,), generator=gen)},
                 group_values={"g": NAMES})


@pytest.mark.parametrize("soft", [False, True], ids=["fused", "general"])
def test_an_empty_subset_reads_the_batch_rate_of_its_kind_before_any_observation(soft):
    tpr_b, tpr, fp_b, fp = (R.true_positive_rate(group("g", "b")), R.true_positive_rate(),
                            R.false_positive_proportion(group("g", "b")),
                            R.false_positive_proportion())
    ev = RateEvaluator([tpr_b, tpr, fp_b, fp]).train()
    b = group_b_empty(0)
    if soft:
        b = Batch(scores=b.scores, labels=b.labels,
                  groups={"g": torch.nn.functional.one_hot(b.groups["g"], 2).float()},
                  group_values={"g": NAMES})
    v = ev(b)
    y, hit = b.labels, (b.scores > 0).float()
    assert float(v.true[0]) == pytest.approx(float((hit * y).sum() / y.sum()))   # TPR overall
    assert float(v.true[2]) == pytest.approx(float((hit * (1 - y)).mean()))      # FP overall
    assert float(v.true[0]) == pytest.approx(float(v.true[1]))
    for side in (v.upper, v.lower):        # the surrogate leaf reads the same estimate
        assert float(side[0]) == pytest.approx(float(v.true[0]))
    assert int(v.empty_subsets) == 2       # g = b & y = 1, and g = b


def test_an_empty_subset_reads_its_running_rate_estimate_and_gives_no_gradient():
    decay = 0.9
    tpr_b = R.true_positive_rate(group("g", "b"))
    ev = RateEvaluator([tpr_b, R.true_positive_rate(group("g", "a"))], decay=decay).train()
    seen = []
    for t in range(4):                     # b is present: its TPR is observed
        b = with_b(t)
        seen.append(float(ev(b).true[0]))
        ref = ev.evaluate_split([b]).true[0]
        assert seen[-1] == pytest.approx(float(ref), abs=1e-6)
    ema = sum((1 - decay) * decay ** (3 - t) * x for t, x in enumerate(seen))
    estimate = ema / (1 - decay ** 4)
    for t in range(3):                     # b is absent: the estimate stays, with no gradient
        batch = group_b_empty(10 + t, requires_grad=True)
        v = ev(batch)
        assert float(v.true[0]) == pytest.approx(estimate, rel=1e-6)
        assert float(v.upper[0].detach()) == pytest.approx(estimate, rel=1e-6)
        assert float(v.lower[0].detach()) == pytest.approx(estimate, rel=1e-6)
        (grad,) = torch.autograd.grad(v.upper[0] + v.lower[0], batch.scores,
                                      retain_graph=True)
        assert torch.equal(grad, torch.zeros_like(grad))
        (grad_a,) = torch.autograd.grad(v.upper[1], batch.scores)
        assert bool(grad_a.abs().sum() > 0)   # the present group does give one
    # the state round-trips: a fresh evaluator loaded from it reads the same estimate
    fresh = RateEvaluator([tpr_b, R.true_positive_rate(group("g", "a"))], decay=decay)
    fresh.load_state_dict(ev.state_dict())
    assert float(fresh(group_b_empty(20)).true[0]) == pytest.approx(estimate, rel=1e-6)


def test_an_old_state_dict_without_rate_estimates_still_loads():
    ev = RateEvaluator([R.true_positive_rate(group("g", "b"))])
    ev(with_b(0))
    sd = {k: v for k, v in ev.state_dict().items() if not k.startswith("rate_")}
    fresh = RateEvaluator([R.true_positive_rate(group("g", "b"))])
    fresh.load_state_dict(sd)
    torch.testing.assert_close(fresh.running_average, ev.running_average)
    b = group_b_empty(1)
    y, hit = b.labels, (b.scores > 0).float()
    assert float(fresh(b).true[0]) == pytest.approx(float((hit * y).sum() / y.sum()))


def test_parity_on_an_empty_group_reads_neutral_and_no_nan_reaches_the_step_record():
    from fairgames.game import ConstrainedOptimizer, Problem

    a, b = group("g", "a"), group("g", "b")
    problem = Problem(R.error_rate(), [
        (R.true_positive_rate(a) - R.true_positive_rate(b) <= 0.05).named("tpr"),
        (R.true_positive_rate(b) - R.true_positive_rate(a) <= 0.05).named("tpr_rev"),
        (R.fmeasure(a) - R.fmeasure(b) <= 0.05).named("f1")])
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), 0.1))
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 2, generator=gen), (torch.rand(16, generator=gen) < 0.5).float()
    copt.zero_grad()
    copt.lagrangian(Batch(scores=model(x)[:, 0], labels=y,
                          groups={"g": torch.zeros(16, dtype=torch.long)},
                          group_values={"g": NAMES})).backward()
    copt.step()
    rec = copt.last.to_host()
    flat = [v for x in rec.values() for v in (x if isinstance(x, list) else [x])]
    assert all(math.isfinite(v) for v in flat), rec
    # group b's rates read as the batch's own: the parities are -0.05 both ways, no signal
    assert rec["constraints_true"][:2] == pytest.approx([-0.05, -0.05], abs=1e-6)
    assert rec["constraints_true"][2] == pytest.approx(-0.05, abs=1e-6)
    assert rec["empty_subsets"] > 0


def test_a_zero_ratio_denominator_in_a_batch_is_no_nan_in_the_step_record():
    from fairgames.game import ConstrainedOptimizer, Problem

    problem = Problem(R.error_rate(), [(R.fmeasure() >= 0.3).named("f1")])
    model = torch.nn.Linear(2, 1)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), 0.1))
    x = torch.randn(8, 2)
    with torch.no_grad():
        model.bias.fill_(-100.0)           # nothing predicted positive, and no positive
    copt.zero_grad()
    copt.lagrangian(Batch(scores=model(x)[:, 0], labels=torch.zeros(8))).backward()
    copt.step()
    rec = copt.last.to_host()
    assert rec["constraints_true"] == pytest.approx([0.3])    # F1 read as 0 (TP = 0)


# ------------------------------------------------------------------ bound gradients
@pytest.mark.parametrize("metric", [R.gmean, R.hmean, R.qmean], ids=["gmean", "hmean", "qmean"])
@pytest.mark.parametrize("which", ["lower", "upper"])
def test_psi_bound_gradients_are_finite(metric, which):
    expr = metric()
    ev = RateEvaluator([expr]).train()
    for seed in range(100):
        gen = torch.Generator().manual_seed(seed)
        s = (3 * torch.randn(32, generator=gen)).requires_grad_()
        y = (torch.rand(32, generator=gen) < 0.5).float()
        (grad,) = torch.autograd.grad(expr.evaluate(ev(Batch(scores=s, labels=y)), which), s)
        assert bool(torch.isfinite(grad).all()), seed


@pytest.mark.parametrize("psi", [R.psi.geometric_mean(2), R.psi.geometric_mean(3),
                                 R.psi.harmonic_mean(2), R.psi.harmonic_mean(3),
                                 R.psi.root_mean_square(2)], ids=lambda p: p.name)
def test_psi_values_are_exact_and_gradients_finite_on_the_whole_domain(psi):
    grid = torch.tensor([0.0, 1e-30, 1e-6, 0.3, 1.0], dtype=torch.float64)
    points = torch.cartesian_prod(*[grid] * psi.arity)
    for p in points:
        args = [x.clone().requires_grad_() for x in p]
        value = psi(*args)
        grads = torch.autograd.grad(value, args)
        assert all(bool(torch.isfinite(g)) for g in grads), p.tolist()
        u = p.numpy()
        if psi.name.startswith("geometric"):
            ref = float(np.prod(u) ** (1 / len(u)))
        elif psi.name.startswith("harmonic"):
            ref = 0.0 if (u == 0).any() else len(u) / float((1 / u).sum())
        else:
            ref = float(np.sqrt((u ** 2).mean()))
        assert float(value.detach()) == pytest.approx(ref, rel=1e-12, abs=1e-300), p.tolist()


def test_harmonic_mean_gradient_at_a_zero_argument_is_its_limit():
    u = torch.tensor(0.0, dtype=torch.float64, requires_grad=True)
    v = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    gu, gv = torch.autograd.grad(R.psi.HARMONIC_MEAN_2(u, v), [u, v])
    assert float(gu) == pytest.approx(2.0) and float(gv) == 0.0   # d/du 2uv/(u + v) at u = 0


# ------------------------------------------------------------------ undefined ratios
def test_precision_with_no_predicted_positive_is_undefined_in_reports():
    s = torch.tensor([-1.0, -2.0, 0.5, -0.5])
    y = torch.tensor([1.0, 0.0, 1.0, 0.0])
    g = torch.tensor([0, 0, 1, 1])
    batch = Batch(scores=s, labels=y, groups={"g": g}, group_values={"g": NAMES})
    ev = ExactEvaluator({"precision_a": R.precision(group("g", "a")),
                         "precision_b": R.precision(group("g", "b")),
                         "f1_a": R.fmeasure(group("g", "a")),
                         "tpr_a": R.true_positive_rate(group("g", "a"))})
    values = ev.leaf_values(batch)
    got = ev.read(values)
    yhat = (s > 0).long().numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = {"precision_a": precision_score(y[:2], yhat[:2], zero_division=np.nan),
               "precision_b": precision_score(y[2:], yhat[2:], zero_division=np.nan),
               "f1_a": f1_score(y[:2], yhat[:2], zero_division=np.nan)}
    assert math.isnan(got["precision_a"]) and math.isnan(ref["precision_a"])
    assert got["precision_b"] == ref["precision_b"] == 1.0
    assert got["f1_a"] == ref["f1_a"] == 0.0          # FN > 0: F1 is defined (0)
    assert got["tpr_a"] == 0.0
    reasons = ev.undefined(values)
    assert set(reasons) == {"precision_a"}
    assert "denominator" in reasons["precision_a"] and "g" in reasons["precision_a"]
    table = GroupTable("g", NAMES, "binary").evaluate(batch)
    assert table["g=a"]["precision"] is None and table["g=b"]["precision"] == 1.0


def test_an_empty_subset_is_named_as_the_reason():
    ev = ExactEvaluator({"tpr_b": R.true_positive_rate(group("g", "b"))}, optional=["tpr_b"])
    batch = Batch(scores=torch.tensor([1.0, 2.0]), labels=torch.tensor([1.0, 0.0]),
                  groups={"g": torch.tensor([0, 1])}, group_values={"g": NAMES})
    values = ev.leaf_values(batch)
    assert math.isnan(ev.read(values)["tpr_b"])
    reason = ev.undefined(values)["tpr_b"]
    assert "no example" in reason and "group('g', 'b')" in reason
