"""The structure of the expression graph the game compiles: de-duplicated leaves, affine
coefficients, ratio and ψ nodes, and constraints normalised to ``g <= 0`` / ``g == 0``."""

from __future__ import annotations

import pytest
import torch

import fairgames.rates as R
from fairgames.rates import (
    Batch,
    Expression,
    PsiNode,
    RateEvaluator,
    RatioNode,
    everything,
    group,
    negative_label,
    positive_label,
)
from fairgames.rates import events as E

A, B = group("g", "a"), group("g", "b")


def coefficients(expr: Expression) -> dict[str, float]:
    return {str(lf): c for lf, c in expr.affine.terms}


def batch() -> Batch:
    return Batch(scores=torch.tensor([1.5, -0.5, 0.2, -2.0, 0.7, -0.1]),
                 labels=torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0]),
                 groups={"g": torch.tensor([0, 0, 0, 1, 1, 1])}, group_values={"g": ["a", "b"]})


def test_leaves_are_deduplicated_by_structure():
    t1, t2 = R.true_positive_rate(A), R.true_positive_rate(group("g", "a"))
    assert t1.leaves() == t2.leaves() and t1 is not t2
    # the same subset written in another order is the same leaf
    assert R.rate(E.PREDICTED_POSITIVE, positive_label() & A).leaves() == t1.leaves()
    assert R.recall(A).leaves() == t1.leaves()
    assert R.coverage().leaves() == R.positive_prediction_rate(everything()).leaves()
    s = t1 + t2
    assert len(s.leaves()) == 1 and list(coefficients(s).values()) == [2.0]
    ev = RateEvaluator([t1, 3 * t2, R.precision(A), R.true_positive_proportion(A),
                        R.fmeasure(A), R.true_positive_rate(A) <= 0.9])
    # tpr(A); TP(A), FP(A) of precision; TP(A) again; FN(A), FP(A) again of F1; tpr(A) again
    assert len(ev.leaves) == 4
    assert len({lf.key for lf in ev.leaves}) == 4
    # distinct structures stay distinct
    assert R.false_positive_rate(A).leaves() != t1.leaves()
    assert R.true_positive_rate(B).leaves() != t1.leaves()
    assert R.score_rates([0.5])[0].leaves() != R.score_rates([0.25])[0].leaves()
    assert R.group_loss("hinge", A).leaves() != R.group_loss("logistic", A).leaves()


def test_model_independent_leaves_are_flagged():
    (p,) = R.label_rate(A).leaves()
    assert not p.depends_on_model
    assert not R.label_rate().depends_on_model
    for e in (R.positive_prediction_rate(), R.true_positive_rate(A), R.churn_rate(),
              R.group_loss("squared"), *R.score_rates([1.0])):
        assert all(lf.depends_on_model for lf in e.leaves())
    k = R.kld(A)
    flags = {str(lf): lf.depends_on_model for lf in k.leaves()}
    assert sorted(flags.values()) == [False, True]
    # the label rate is a constant for the optimiser: its bounds are its true value
    v = RateEvaluator([k])(batch())
    i = v.position(R.label_rate().leaves()[0])
    assert float(v.upper[i]) == float(v.true[i]) == float(v.lower[i]) == pytest.approx(0.5)


def test_affine_arithmetic_coefficients_and_values():
    tpr_a, fpr_b, err = R.true_positive_rate(A), R.false_positive_rate(B), R.error_rate()
    e = 2 * tpr_a - 3.0 * fpr_b + 0.5 - err / 4 + (1 - tpr_a)
    assert e.is_affine
    assert coefficients(e) == {str(tpr_a.leaves()[0]): 1.0, str(fpr_b.leaves()[0]): -3.0,
                               str(err.leaves()[0]): -0.25}
    assert e.affine.constant == 1.5
    assert (tpr_a - tpr_a).leaves() == [] and (tpr_a - tpr_a).is_constant
    v = RateEvaluator([e])(batch())
    t, f, r = (float(x.evaluate(v)) for x in (tpr_a, fpr_b, err))
    assert float(e.evaluate(v)) == pytest.approx(2 * t - 3 * f + 0.5 - r / 4 + 1 - t)
    assert float((-e).evaluate(v)) == pytest.approx(-float(e.evaluate(v)))
    # constants multiply and divide like numbers
    two = R.as_expression(2.0)
    assert coefficients(tpr_a * two) == coefficients(two * tpr_a) == coefficients(2 * tpr_a)
    assert coefficients(tpr_a / two) == {str(tpr_a.leaves()[0]): 0.5}


def test_ratio_and_psi_nodes():
    p = R.precision(A)
    assert not p.is_affine and p.affine.terms == ()
    ((c, node),) = p.nodes
    assert c == 1.0 and isinstance(node, RatioNode)
    assert [(str(lf), k) for lf, k in node.numerator.terms] == [
        (str(R.true_positive_proportion(A).leaves()[0]), 1.0)]
    assert sorted((str(lf), k) for lf, k in node.denominator.terms) == sorted([
        (str(R.true_positive_proportion(A).leaves()[0]), 1.0),
        (str(R.false_positive_proportion(A).leaves()[0]), 1.0)])
    assert node.in_unit_interval and R.fbeta(2.0).nodes[0][1].in_unit_interval
    assert not R.win_loss_ratio().nodes[0][1].in_unit_interval
    f2 = R.fbeta(2.0)   # 5TP / (5TP + 4FN + FP): pseudo-convex, so a ratio, not a ψ
    ((_, ratio),) = f2.nodes
    assert isinstance(ratio, RatioNode)
    assert sorted(k for _, k in ratio.numerator.terms) == [5.0]
    assert sorted(k for _, k in ratio.denominator.terms) == [1.0, 4.0, 5.0]
    # a difference of ratios keeps two nodes with signed coefficients
    pp = R.predictive_parity(A, B)
    assert sorted(c for c, _ in pp.nodes) == [-1.0, 1.0]
    assert all(isinstance(n, RatioNode) for _, n in pp.nodes)
    # the same node twice merges
    assert len((R.precision(A) + R.precision(A)).nodes) == 1
    # ψ nodes state curvature and monotonicity
    g = R.gmean(A)
    ((_, psi),) = g.nodes
    assert isinstance(psi, PsiNode) and psi.psi.curvature == "concave"
    assert psi.psi.monotone == (1, 1) and len(psi.args) == 2
    q = R.qmean()
    assert q.affine.constant == 1.0 and q.nodes[0][0] == -1.0
    assert q.nodes[0][1].psi.curvature == "convex"
    k = R.kld()
    assert k.nodes[0][1].psi.monotone == (0, 0) and k.nodes[0][1].psi.curvature == "convex"
    # a ψ of a ψ is allowed; a product is not
    nested = R.hmean() - 0.5 * R.gmean()
    assert sorted(c for c, _ in nested.nodes) == [-0.5, 1.0]
    v = RateEvaluator([nested, p, f2])(batch())
    tpr, tnr = (float(x.evaluate(v)) for x in (R.true_positive_rate(), R.true_negative_rate()))
    assert float(nested.evaluate(v)) == pytest.approx(
        2 / (1 / tpr + 1 / tnr) - 0.5 * (tpr * tnr) ** 0.5)


def test_comparisons_normalise_to_g_le_zero_and_g_eq_zero():
    a, b = R.true_positive_rate(A), R.true_positive_rate(B)
    v = RateEvaluator([a, b])(batch())
    ta, tb = float(a.evaluate(v)), float(b.evaluate(v))
    le, ge, eq = a <= b + 0.05, a >= b - 0.05, a == b
    assert (le.sense, ge.sense, eq.sense) == ("<=", "<=", "==")
    assert float(le.value(v)) == pytest.approx(ta - tb - 0.05)
    assert float(ge.value(v)) == pytest.approx(tb - 0.05 - ta)
    assert float(eq.value(v)) == pytest.approx(ta - tb)
    assert float(le.violation(v)) == pytest.approx(max(0.0, ta - tb - 0.05))
    assert float(eq.violation(v)) == pytest.approx(abs(ta - tb))
    # numbers on either side; reflected comparisons from Python
    c1, c2 = 0.3 <= a, a >= 0.3
    assert c1.sense == c2.sense == "<=" and float(c1.value(v)) == pytest.approx(0.3 - ta)
    assert float(c2.value(v)) == pytest.approx(0.3 - ta)
    named = le.named("tpr_gap")
    assert named.name == "tpr_gap" and named.expression is le.expression
    assert "tpr_gap" in str(named)
    # the README's F-measure constraint: fmeasure(all) >= fmeasure(group) - 0.02
    f = R.fmeasure() >= R.fmeasure(A) - 0.02
    assert f.sense == "<=" and len(f.expression.nodes) == 2


def test_subset_algebra_structure():
    s = (A & positive_label()) | ~B
    assert str(s) == "((group('g', 'a') & label(1)) | ~group('g', 'b'))"
    assert (A & everything()) is A and (everything() & A) is A
    assert str(A | everything()) == "all"
    assert (A & B).key() == (B & A).key() and (A | B).key() == (B | A).key()
    assert (A & B).key() != (A | B).key()
    assert sorted(lit.factor for lit in s.literals()) == ["group:g", "group:g", "label"]
    assert str(negative_label()) == "label(0)"
