"""The fused training pass (one autograd node) equals the general, op-by-op pass: values,
proportions, running estimates and gradients, for every surrogate, with and without weights,
thresholds, one-hot and index_add cell sums, reused (cached layout) and fresh batches."""

from __future__ import annotations

import pytest
import torch

import fairgames.rates as R
from fairgames.rates import Batch, RateEvaluator, group


def _items(names: list[str]) -> list:
    return ([R.true_positive_rate(group("a", v)) for v in names]
            + [R.error_rate(), *R.score_rates([0.0, 0.5], group("a", names[0])),
               R.true_negative_rate(group("a", names[-1]))])


def _run(kind: str, weighted: bool, fresh: bool, denominator: str, values: int, fused: bool):
    names = [f"v{i}" for i in range(values)]
    ev = RateEvaluator(_items(names), kind, denominator=denominator)
    gen = torch.Generator().manual_seed(0)
    n = 300
    out = []
    g = y = w = None
    for step in range(4):
        if fresh or step == 0:
            g = torch.randint(0, values, (n,), generator=gen)
            if step == 2:
                g = torch.zeros(n, dtype=torch.long)         # the other values are empty
            y = (torch.rand(n, generator=gen) < 0.5).float()
            w = torch.rand(n, generator=gen) + 0.1 if weighted else None
        s = (torch.randn(n, generator=gen) * 2).requires_grad_()
        batch = Batch(scores=s, labels=y, weights=w, groups={"a": g},
                      group_values={"a": names})
        plan = ev._plan(batch)
        assert plan.fused is not None
        if not fused:
            plan.fused = None
        v = ev(batch)
        c = torch.randn(len(v.upper), generator=torch.Generator().manual_seed(step))
        (grad,) = torch.autograd.grad((c * v.upper).sum() + (c.flip(0) * v.lower).sum(), s)
        out.append([v.true, v.upper.detach(), v.lower.detach(), v.proportions, grad,
                    ev.running_average.clone()])
        if not fused:
            ev._plans.clear()       # compile afresh (fused) for the next batch of the loop
    return out


@pytest.mark.parametrize("kind", ["hinge", "logistic", "sigmoid", "ramp"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("fresh", [False, True], ids=["same_batch", "minibatches"])
@pytest.mark.parametrize("values", [2, 12], ids=["onehot", "index_add"])
def test_fused_pass_equals_the_general_pass(kind, weighted, fresh, values):
    for denominator in ("batch", "running"):
        fused = _run(kind, weighted, fresh, denominator, values, True)
        general = _run(kind, weighted, fresh, denominator, values, False)
        for a, b in zip(fused, general, strict=True):
            for x, z in zip(a, b, strict=True):
                torch.testing.assert_close(x.double(), z.double(), rtol=1e-5, atol=1e-6)


def test_fused_pass_is_one_autograd_node_and_flat_bounds_are_upper_then_lower():
    ev = RateEvaluator([R.true_positive_rate(group("a", v)) for v in ("x", "y")])
    s = torch.randn(50, requires_grad=True)
    batch = Batch(scores=s, labels=(torch.rand(50) < 0.5).float(),
                  groups={"a": torch.randint(0, 2, (50,))}, group_values={"a": ["x", "y"]})
    v = ev(batch)
    assert v.flat_bounds is not None and not v.true.requires_grad
    assert v.flat_bounds.grad_fn.name() == "_FusedPassBackward"
    torch.testing.assert_close(v.flat_bounds, torch.cat([v.upper, v.lower]))
    assert bool((v.upper >= v.true).all() & (v.true >= v.lower).all())


def test_a_changed_label_tensor_invalidates_the_cached_layout():
    names = ["x", "y"]
    ev = RateEvaluator([R.true_positive_rate(group("a", v)) for v in names])
    s = torch.tensor([1.0, -1.0, 1.0, -1.0])
    y = torch.tensor([1.0, 1.0, 1.0, 0.0])
    g = torch.tensor([0, 0, 1, 1])
    fields = {"groups": {"a": g}, "group_values": {"a": names}}

    def tpr() -> list[float]:
        return ev(Batch(scores=s, labels=y, **fields)).true.tolist()

    assert tpr() == pytest.approx([0.5, 1.0])
    y[3] = 1.0                                  # in place: the version counter moves
    assert tpr() == pytest.approx([0.5, 0.5])
    g[1] = 1                                    # example 1 (a miss) moves to group y
    assert tpr() == pytest.approx([1.0, 1 / 3])


def _bound_batch(values: int, weighted: bool, soft: bool, dtype: torch.dtype, seed: int = 0):
    names = [f"v{i}" for i in range(values)]
    gen = torch.Generator().manual_seed(seed)
    n = 200
    g = torch.randint(0, values, (n,), generator=gen)
    if soft:
        g = torch.nn.functional.one_hot(g, values).float() * 0.9
    y = (torch.rand(n, generator=gen) < 0.5).float()
    w = torch.rand(n, generator=gen) + 0.1 if weighted else None
    s = (torch.randn(n, generator=gen, dtype=torch.float64) * 2).to(dtype).requires_grad_()
    return s, Batch(scores=s, labels=y, weights=w, groups={"a": g}, group_values={"a": names})


@pytest.mark.parametrize("kind", ["hinge", "logistic", "ramp"])
@pytest.mark.parametrize("values", [2, 12], ids=["onehot", "index_add"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft_general_pass"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_combination_bound_equals_the_sign_split_dot_of_the_bounds(kind, values, weighted,
                                                                   soft, dtype):
    """Σ c⁺·upper + c⁻·lower at costs read off the true rates, and its gradient, against the
    same sum formed from an independent evaluator's bounds (paper 000 eq. (4))."""
    names = [f"v{i}" for i in range(values)]
    items = _items(names)
    ev, ref = RateEvaluator(items, kind), RateEvaluator(items, kind)
    for step in range(3):                      # the running estimates advance alike
        s, batch = _bound_batch(values, weighted, soft, dtype, seed=step)
        seen = []

        def costs(true: torch.Tensor, step=step, seen=seen) -> torch.Tensor:
            seen.append(true.clone())
            signs = torch.tensor([(-1.0) ** i for i in range(true.shape[0])])
            return signs * (true + 0.1 * (step + 1))      # mixed signs, read off the rates

        value, leaves = ev.combination_bound(batch, costs)
        (grad,) = torch.autograd.grad(value, s)
        v = ref(batch)
        c = costs(v.true).detach()
        expected = (torch.dot(c.clamp_min(0), v.upper) + torch.dot(c.clamp_max(0), v.lower))
        (grad_ref,) = torch.autograd.grad(expected, s)
        assert grad.dtype == s.dtype and not leaves.true.requires_grad
        torch.testing.assert_close(seen[0], v.true.detach())
        torch.testing.assert_close(leaves.true, v.true.detach())
        torch.testing.assert_close(leaves.upper, v.upper.detach())
        torch.testing.assert_close(leaves.lower, v.lower.detach())
        torch.testing.assert_close(value.double(), expected.detach().double(),
                                   rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(grad.double(), grad_ref.double(), rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(ev.running_average, ref.running_average)


def test_combination_bound_is_one_node_scaled_by_the_incoming_gradient():
    ev = RateEvaluator([R.true_positive_rate(group("a", v)) for v in ("v0", "v1")])
    s, batch = _bound_batch(2, False, False, torch.float32)
    value, _ = ev.combination_bound(batch, lambda t: torch.tensor([1.0, -2.0]))
    assert value.grad_fn.name() == "_FusedBoundBackward"
    (g1,) = torch.autograd.grad(value, s, retain_graph=True)
    (g3,) = torch.autograd.grad(3.0 * value, s)
    torch.testing.assert_close(g3, 3.0 * g1)
    with torch.no_grad():                      # no gradient wanted: nothing is saved
        value, _ = ev.combination_bound(batch, lambda t: torch.tensor([1.0, -2.0]))
    assert value.grad_fn is None


def test_fused_nodes_refuse_a_second_derivative_instead_of_a_wrong_one():
    """Both fused nodes compute their backward from constants of the forward (slopes, the
    per-example gradient): a gradient penalty through them (create_graph=True) must raise,
    not return a Hessian without the surrogate's curvature; a first-order pass still works."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    x = torch.randn(40, 3)
    y = (torch.rand(40) < 0.5).float()
    g = torch.randint(0, 2, (40,))
    ev = RateEvaluator([R.true_positive_rate(group("a", v)) for v in ("v0", "v1")], "logistic")

    def batch() -> Batch:
        return Batch(scores=model(x)[:, 0], labels=y, groups={"a": g},
                     group_values={"a": ["v0", "v1"]})

    losses = [lambda: ev.combination_bound(batch(), lambda t: torch.tensor([1.0, -2.0]))[0],
              lambda: ev(batch()).flat_bounds.sum()]
    for loss in losses:
        with pytest.raises(R.RatesError, match="first-order"):
            torch.autograd.grad(loss(), list(model.parameters()), create_graph=True)
        grads = torch.autograd.grad(loss(), list(model.parameters()))
        assert all(torch.isfinite(t).all() for t in grads)
