"""Problem: compilation into Lagrangian rows, slacks and ratio terms; identities with the
expression algebra; bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgames.game import Problem
from fairgames.rates import (
    Batch,
    LeafLookup,
    error_rate,
    false_positive_rate,
    fmeasure,
    gmean,
    group,
    kld,
    label_rate,
    positive_prediction_rate,
    precision,
    true_positive_rate,
)

A, B = group("g", "a"), group("g", "b")


def _batch(n: int = 400, seed: int = 0) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    return Batch(scores=torch.randn(n, generator=gen), labels=(torch.rand(n, generator=gen) < 0.4)
                 .float(), groups={"g": (torch.rand(n, generator=gen) < 0.3).long()},
                 group_values={"g": ["a", "b"]})


RATES = [true_positive_rate(A), true_positive_rate(B), false_positive_rate(A),
         positive_prediction_rate(B), error_rate(), label_rate(A)]


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, len(RATES) - 1), st.floats(-3, 3)), min_size=1,
                max_size=5), st.floats(-1, 1), st.sampled_from(["<=", ">=", "=="]))
def test_affine_rows_equal_the_expressions_true_values(terms, constant, sense):
    expr = sum((c * RATES[i] for i, c in terms), start=RATES[0] * 1e-3) + constant
    con = {"<=": expr <= 0.1, ">=": expr >= 0.1, "==": expr == 0.1}[sense]
    problem = Problem(error_rate(), [con])
    ev = problem.make_evaluator()
    values = ev(_batch())
    g = con.expression.evaluate(values, "true")
    rows = problem.terms.affine_rows(values.true)
    expected = [g] if sense != "==" else [g, -g]
    np.testing.assert_allclose(rows.numpy(), torch.stack(expected).numpy(), atol=1e-5)
    # The original constraint values are the same numbers.
    torch.testing.assert_close(problem.true_values(values.true)[1][0], g, atol=1e-5, rtol=0)
    # θ's leaf costs at λ: d(ω·f + Σλ g)/dR, checked against autograd through the expression.
    lam = torch.rand(problem.num_multipliers)
    look = _Differentiable(values)
    lag = error_rate().evaluate(look) + lam[0] * con.expression.evaluate(look)
    if sense == "==":
        lag = lag - lam[1] * con.expression.evaluate(look)
    (grad,) = torch.autograd.grad(lag, look.leaves)
    costs = problem.terms.leaf_costs(torch.tensor(1.0), lam, torch.zeros(0))
    np.testing.assert_allclose(costs.numpy(), grad.numpy(), atol=1e-5)


class _Differentiable(LeafLookup):
    """True leaf values as a differentiable vector (an independent route to ∂L/∂R)."""

    def __init__(self, values):
        self.values = values
        self.leaves = values.true.clone().requires_grad_(True)

    def true_value(self, leaf):
        return self.leaves[self.values.position(leaf)]


def test_model_independent_leaves_get_no_multiplier_and_shift_the_row():
    # PPR(a) <= P(y = 1 | a): one row; the label rate's value enters the row, not θ's gradient.
    problem = Problem(error_rate(), [positive_prediction_rate(A) <= label_rate(A)])
    assert problem.num_multipliers == 1
    ev = problem.make_evaluator()
    b = _batch()
    values = ev(b)
    y, g, s = b.labels.numpy(), b.groups["g"].numpy(), b.scores.numpy()
    expected = (s[g == 0] > 0).mean() - y[g == 0].mean()
    assert float(problem.terms.affine_rows(values.true)[0]) == pytest.approx(expected, abs=1e-6)
    # The label rate's surrogate bounds equal its true value: no gradient reaches θ through it.
    i = values.position(label_rate(A).leaves()[0])
    assert values.upper[i] == values.true[i] == values.lower[i]


def test_names_senses_and_rows():
    gap = true_positive_rate(A) - true_positive_rate(B)
    problem = Problem(error_rate(), [(gap <= 0.05).named("gap"), gap >= -0.05, gap == 0.0])
    assert problem.constraint_names == ["gap", "c1", "c2"]
    assert problem.terms.row_names == ["gap", "c1", "c2[<=]", "c2[>=]"]
    problem = Problem(error_rate(), {"x": gap <= 0.1, "y": gap >= -0.1})
    assert problem.constraint_names == ["x", "y"]


def test_psi_terms_become_slacks_with_rows_by_direction():
    # 1 - gmean: ψ concave and increasing, coefficient −1 → ξ ≤ R (the R-part is −R + ξ ≤ 0).
    terms = Problem(1.0 - gmean()).terms
    assert terms.num_slacks == 2 and terms.num_rows == 2
    np.testing.assert_allclose(terms.b.numpy(), np.eye(2))
    np.testing.assert_allclose(terms.a.sum(1).numpy(), [-1.0, -1.0])
    # KLD ≤ ε in a constraint: p fixed, p̂ two-sided; rows follow the constraint row.
    p = Problem(error_rate(), [(kld(A) <= 0.05).named("kld")])
    t = p.terms
    assert t.row_names[0] == "kld" and t.row_kinds == ["constraint", "slack", "slack"]
    assert t.num_fixed == 1 and t.num_slacks == 1
    np.testing.assert_allclose(t.b[1:].numpy(), [[-1.0], [1.0]])


def test_ratio_terms_linearised_and_as_slacks():
    problem = Problem(-fmeasure(), [precision(A) >= 0.6])
    lin = problem.compile("linearize")
    assert lin.num_rows == 1 and lin.num_linear == 2 and lin.num_slacks == 0
    ev = problem.make_evaluator()
    values = ev(_batch())
    # Linearised: θ's costs are the gradient of the ratios at the true rates (autograd).
    look = _Differentiable(values)
    lam = torch.tensor([0.7])
    lag = (-fmeasure()).evaluate(look) + lam[0] * problem.constraints["c0"].expression.evaluate(
        look)
    (grad,) = torch.autograd.grad(lag, look.leaves)
    costs = lin.leaf_costs(torch.tensor(1.0), lam, torch.zeros(0), lin.ratio_values(values.true))
    np.testing.assert_allclose(costs.numpy(), grad.numpy(), atol=1e-5)
    # ... and the row's gain is the true constraint value.
    z, _ = lin.ratio_values(values.true)
    rows = lin.row_values(lin.affine_rows(values.true), torch.zeros(0), torch.zeros(0),
                          torch.zeros(0), z)
    torch.testing.assert_close(rows[0], problem.true_values(values.true)[1][0], atol=1e-5,
                               rtol=0)
    # Slack form: one ratio slack per ratio; at z = num/den the ratio rows are tight and the
    # constraint row equals the true value.
    sl = problem.compile("gradient")
    assert sl.num_slacks == 2 and sl.num_rows == 3 and sl.num_bilinear == 2
    s = sl.initial_slacks(values.true)
    rows = sl.row_values(sl.affine_rows(values.true), sl.bilinear_values(values.true), s,
                         torch.zeros(0))
    np.testing.assert_allclose(rows[1:].numpy(), [0.0, 0.0], atol=1e-5)
    torch.testing.assert_close(rows[0], problem.true_values(values.true)[1][0], atol=1e-5,
                               rtol=0)
    # F-measure's numerator is dominated by its denominator: its slack lives in [0, 1].
    assert float(sl.slack_hi[0]) == 1.0


def test_bad_input_raises_clear_errors():
    with pytest.raises(ValueError, match="objective expression, a loss, or both"):
        Problem()
    with pytest.raises(TypeError, match="not a Constraint"):
        Problem(error_rate(), [error_rate()])
    with pytest.raises(TypeError, match="objective is a constraint"):
        Problem(error_rate() <= 0.1)
    with pytest.raises(ValueError, match="named 'x'"):
        Problem(error_rate(), [(error_rate() <= 0.2).named("x"), (error_rate() <= 0.3).named("x")])
    with pytest.raises(ValueError, match="not convex"):
        Problem(gmean())                      # minimising a concave ψ
    with pytest.raises(ValueError, match="not convex"):
        Problem(error_rate(), [gmean() <= 0.5])
    with pytest.raises(ValueError, match="no rate"):
        Problem(0.0, loss=lambda s, b: s.mean())
    with pytest.raises(TypeError, match="callable"):
        Problem(error_rate(), loss=3)
    with pytest.raises(ValueError, match="ratios must be"):
        Problem(error_rate()).compile("magic")


def _hand(problem, coefs: dict[str, float]) -> list[float]:
    """A row over the problem's leaves from ``{str(leaf): coefficient}``."""
    names = [str(lf) for lf in problem.leaves]
    assert set(coefs) <= set(names), (coefs, names)
    return [coefs.get(n, 0.0) for n in names]


def test_num_den_rows_and_box_of_fmeasure_parity_by_hand():
    a, b = group("group", "0"), group("group", "1")
    problem = Problem(-fmeasure(), [(fmeasure(b) >= fmeasure(a) - 0.02).named("f1_parity")])
    t = problem.compile("num_den")

    def leaf(kind, where):
        return f"E[{kind} | {where}]"

    def f1_parts(where):
        tp, fn, fp = (leaf(k, where) for k in ("true_positive", "false_negative",
                                                "false_positive"))
        return {tp: 2.0}, {tp: 2.0, fn: 1.0, fp: 1.0}

    g0, g1 = "group('group', '0')", "group('group', '1')"
    (n_all, d_all), (n_0, d_0), (n_1, d_1) = f1_parts("all"), f1_parts(g0), f1_parts(g1)
    neg = lambda d: {k: -v for k, v in d.items()}  # noqa: E731
    # −F (c < 0): a ≤ 2TP, 2TP+FN+FP ≤ b. The constraint F_0 − F_1 − 0.02 ≤ 0: F_0 has c > 0
    # (2TP₀ ≤ a, b ≤ den₀), F_1 has c < 0.
    expected = [
        ("f1_parity", {}, {}, -0.02),
        ("objective:ratio#0 a <= num", neg(n_all), {0: 1.0}, 0.0),
        ("objective:ratio#0 den <= b", d_all, {1: -1.0}, 0.0),
        ("f1_parity:ratio#1 num <= a", n_0, {2: -1.0}, 0.0),
        ("f1_parity:ratio#1 b <= den", neg(d_0), {3: 1.0}, 0.0),
        ("f1_parity:ratio#2 a <= num", neg(n_1), {4: 1.0}, 0.0),
        ("f1_parity:ratio#2 den <= b", d_1, {5: -1.0}, 0.0),
    ]
    assert t.row_names == [e[0] for e in expected]
    assert t.row_kinds == ["constraint"] + ["slack"] * 6
    for j, (_, arow, brow, d) in enumerate(expected):
        np.testing.assert_array_equal(t.a[j].numpy(), _hand(problem, arow))
        np.testing.assert_array_equal(t.b[j].numpy(), [brow.get(i, 0.0) for i in range(6)])
        assert float(t.d[j]) == pytest.approx(d)
    # Boxes: a ∈ [0, 2] (2TP with TP ≤ 1), b ∈ [ratio_floor, 4] (2TP + FN + FP ≤ 4).
    np.testing.assert_allclose(t.slack_lo.numpy(), [0.0, 0.01] * 3)
    np.testing.assert_allclose(t.slack_hi.numpy(), [2.0, 4.0] * 3)
    assert [(x.row, x.coefficient) for x in t.num_den_terms] == [(-1, -1.0), (0, 1.0), (0, -1.0)]
    # The θ-player sees only the rows' linear terms: c = Aᵀλ (the objective has no affine part).
    lam = torch.tensor([0.7, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    torch.testing.assert_close(t.leaf_costs(torch.tensor(1.0), lam, t.slack_lo),
                               t.a.t() @ lam)


def test_num_den_of_precision_constraint_and_slack_gradient_closed_form():
    problem = Problem(error_rate(), [precision(A) >= 0.6])
    t = problem.compile("num_den")
    tp, fp = (f"E[{k} | group('g', 'a')]" for k in ("true_positive", "false_positive"))
    # 0.6 − TP/(TP+FP) ≤ 0: c = −1 → a ≤ TP, TP + FP ≤ b; a ∈ [0, 1], b ∈ [0.01, 2].
    assert t.row_names == ["c0", "c0:ratio#0 a <= num", "c0:ratio#0 den <= b"]
    np.testing.assert_array_equal(t.a[1].numpy(), _hand(problem, {tp: -1.0}))
    np.testing.assert_array_equal(t.a[2].numpy(), _hand(problem, {tp: 1.0, fp: 1.0}))
    np.testing.assert_array_equal(t.b.numpy(), [[0.0, 0.0], [1.0, 0.0], [0.0, -1.0]])
    np.testing.assert_allclose(t.slack_lo.numpy(), [0.0, 0.01])
    np.testing.assert_allclose(t.slack_hi.numpy(), [1.0, 2.0])
    # Slacks start at the true numerator and denominator: the slack rows are tight and the
    # constraint row is the true constraint value.
    values = problem.make_evaluator()(_batch())
    s = t.initial_slacks(values.true)
    true = values.true.double()
    np.testing.assert_allclose(s.numpy(), [float(true[1]), float(true[1] + true[2])],
                               rtol=1e-6)
    rows = t.row_values(t.affine_rows(values.true), torch.zeros(0), s, torch.zeros(0))
    np.testing.assert_allclose(rows[1:].numpy(), [0.0, 0.0], atol=1e-6)
    torch.testing.assert_close(rows[0], problem.true_values(values.true)[1][0], atol=1e-5,
                               rtol=0)
    # ∂L/∂(a, b) of λ₀·(−a/b) + λ₁(a − TP) + λ₂(TP + FP − b), in closed form.
    lam = torch.tensor([0.8, 0.3, 0.5])
    sa, sb = 0.4, 0.7
    grad = t.slack_gradient(torch.tensor(1.0), lam, torch.tensor([sa, sb]), torch.zeros(0),
                            torch.zeros(0))
    np.testing.assert_allclose(grad.numpy(), [-0.8 / sb + 0.3, 0.8 * sa / sb ** 2 - 0.5],
                               rtol=1e-6)
    # a/b is not convex: the ψ best response leaves a, b where they are.
    same = t.psi_best_response(torch.tensor(1.0), lam, torch.tensor([sa, sb]), torch.zeros(0))
    np.testing.assert_array_equal(same.numpy(), np.array([sa, sb], dtype=np.float32))


def test_num_den_tight_slacks_with_kkt_multipliers_are_the_linearised_ratio():
    """The algorithm3 preset's reading of Algorithm 3 (``fairgames.game.presets`` note [4]):
    the slacks a, b at their rows (a = num, b = den) with the multipliers ``|c|w/den`` and
    ``|c|w·num/den²`` are a KKT point of the slacks' problem (∂L/∂(a, b) = 0, rows tight), and
    there the θ-player's leaf costs are those of the linearised ratios — the gradient of the
    true Lagrangian ω·(−F) + λ₀·(F₀ − F₁ − 0.02), checked against autograd of the original."""
    a, b = group("group", "0"), group("group", "1")
    problem = Problem(-fmeasure(), [(fmeasure(b) >= fmeasure(a) - 0.02).named("f1_parity")])
    nd, lin = problem.compile("num_den"), problem.compile("linearize")
    gen = torch.Generator().manual_seed(3)
    leaves = (0.05 + 0.25 * torch.rand(nd.num_leaves, generator=gen)).double()
    omega, lam0 = torch.tensor(1.0, dtype=torch.float64), 0.7
    nd, lin = nd.double(), lin.double()
    s = nd.initial_slacks(leaves)
    lam = torch.zeros(nd.num_rows, dtype=torch.float64)
    lam[0] = lam0
    for term in nd.num_den_terms:
        ia, ib = term.slacks
        w = float(omega) if term.row < 0 else float(lam[term.row])
        num, den = float(s[ia]), float(s[ib])
        # each slack has one row; the λ of that row is its KKT multiplier
        (ra, _), = nd.rows_of_slack[ia]
        (rb, _), = nd.rows_of_slack[ib]
        lam[ra] = abs(term.coefficient) * w / den
        lam[rb] = abs(term.coefficient) * w * num / den ** 2
    grad = nd.slack_gradient(omega, lam, s, torch.zeros(0, dtype=torch.float64),
                             torch.zeros(0, dtype=torch.float64))
    torch.testing.assert_close(grad, torch.zeros_like(grad), atol=1e-9, rtol=0)
    rows = nd.row_values(nd.affine_rows(leaves), torch.zeros(0, dtype=torch.float64), s,
                         torch.zeros(0, dtype=torch.float64))
    torch.testing.assert_close(rows[1:], torch.zeros(6, dtype=torch.float64), atol=1e-12,
                               rtol=0)
    # The θ-player's costs: num_den at the KKT point == linearised == ∇_R of the true L.
    costs_nd = nd.leaf_costs(omega, lam, s)
    costs_lin = lin.leaf_costs(omega, lam[:1], None, lin.ratio_values(leaves))
    torch.testing.assert_close(costs_nd, costs_lin, atol=1e-9, rtol=0)
    r = leaves.clone().requires_grad_(True)
    f, g = lin.truth(r)
    (ref,) = torch.autograd.grad(float(omega) * f + lam0 * g[0], r)
    torch.testing.assert_close(costs_lin, ref, atol=1e-9, rtol=0)
    # a/b has an indefinite Hessian everywhere: det = −1/b⁴ < 0 (no interior saddle for OGD).
    ab = s[:2].clone().requires_grad_(True)
    hess = torch.autograd.functional.hessian(lambda x: x[0] / x[1], ab.detach())
    assert float(torch.linalg.det(hess)) == pytest.approx(-1.0 / float(s[1]) ** 4, rel=1e-9)


def test_the_auto_surrogate_is_the_sigmoid_for_two_sided_psi_or_ratios_on_both_sides():
    a, b = group("group", "0"), group("group", "1")
    cases = {
        "hinge": [Problem(error_rate(), [true_positive_rate(a) >= true_positive_rate() - 0.05]),
                  Problem(1.0 - gmean()),                           # monotone ψ: one-sided
                  Problem(1.0 - fmeasure()),                        # no constraint
                  Problem(error_rate(), [precision(a) >= precision(b) - 0.05])],  # one side
        "sigmoid": [Problem(1.0 - fmeasure(), [fmeasure(a) >= fmeasure(b) - 0.02]),
                    Problem(kld(a) + kld(b), [error_rate() <= 0.3]),   # ψ monotone in neither
                    Problem(kld(a) + kld(b)),
                    Problem(error_rate(), [kld(a) <= 0.1])],
    }
    for kind, problems in cases.items():
        assert [p.surrogate.kind for p in problems] == [kind] * len(problems)
    # A name, or a Surrogate, is taken as given.
    assert Problem(1.0 - fmeasure(), [fmeasure(a) >= 0.5],
                   surrogate="hinge").surrogate.kind == "hinge"
