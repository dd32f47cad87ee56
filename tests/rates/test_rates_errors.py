"""Malformed input raises an error that names the problem."""

from __future__ import annotations

import pytest
import torch

import fairgames.rates as R
from fairgames.rates import (
    Batch,
    EmptySubsetError,
    NonFiniteScoresError,
    RateEvaluator,
    RatesError,
    group,
)

Y = torch.tensor([1.0, 0.0, 1.0, 0.0])
S = torch.tensor([0.5, -1.0, 2.0, 0.3])
G = {"sex": torch.tensor([0, 1, 1, 0])}
GV = {"sex": ["Male", "Female"]}


def ok(**kw) -> Batch:
    base = {"scores": S, "labels": Y, "groups": G, "group_values": GV}
    base.update(kw)
    return Batch(**base)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"scores": torch.zeros(5)}, r"scores must have shape \[B\] = \[4\], got \(5,\)"),
    ({"scores": torch.zeros(4, 3)}, r"multiclass"),
    ({"scores": torch.tensor([1, 0, 1, 0])}, r"scores must be a floating-point tensor"),
    ({"scores": [0.1, 0.2, 0.3, 0.4]}, r"scores must be a torch.Tensor"),
    ({"labels": torch.zeros(4, 1)}, r"labels must have shape \[B\]"),
    ({"labels": torch.zeros(0), "scores": torch.zeros(0)}, r"at least one example"),
    ({"weights": torch.ones(3)}, r"weights must have shape \[4\]"),
    ({"label_kind": "ordinal"}, r"label_kind must be one of"),
    ({"scores": None}, r"exactly one of scores and probabilities"),
    ({"probabilities": torch.ones(4) / 2}, r"exactly one of scores and probabilities"),
    ({"groups": {"sex": torch.tensor([0, 1, 1])}}, r"hard group 'sex' must have shape \[4\]"),
    ({"groups": {"race": torch.tensor([0, 1, 1, 0])}}, r"hard group 'race' needs its value names"),
    ({"groups": {"sex": torch.rand(3, 2)}}, r"soft group 'sex' must have shape \[B, G\]"),
    ({"groups": {"sex": torch.rand(4, 3)}}, r"group 'sex' has 3 columns but 2 value names"),
    ({"scores": torch.zeros(2, 4), "mixture_weights": torch.ones(3) / 3},
     r"a mixture needs scores \[R, B\] and mixture_weights \[R\]"),
    ({"baseline_scores": torch.zeros(5)}, r"baseline_scores must have shape \[4\]"),
    ({"sources": torch.zeros(4, dtype=torch.long)}, r"sources needs source_names"),
    ({"sources": torch.zeros(4)}, r"sources must be integer ids"),
])
def test_malformed_batch_is_refused_at_construction(kwargs, message):
    with pytest.raises(RatesError, match=message):
        ok(**kwargs)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"labels": torch.tensor([1.0, 0.5, 1.0, 0.0])}, r"binary labels must be 0 or 1"),
    ({"labels": torch.tensor([1.0, 0.5, 1.5, 0.0]), "label_kind": "real"},
     r"real labels must lie in \[0, 1\]"),
    ({"groups": {"sex": torch.tensor([0, 1, 2, 0])}}, r"group 'sex': codes must lie in 0\.\.1"),
    ({"groups": {"sex": torch.tensor([[0.6, 0.5], [0.2, 0.1], [0.0, 0.0], [1.0, 0.0]])}},
     r"soft group 'sex'.*each row must sum to at most 1"),
    ({"groups": {"sex": torch.tensor([[-0.1, 0.5], [0.2, 0.1], [0.0, 0.0], [1.0, 0.0]])}},
     r"soft group 'sex': memberships must lie in \[0, 1\]"),
    ({"weights": torch.tensor([1.0, -1.0, 1.0, 1.0])}, r"weights must be finite and non-negative"),
    ({"scores": torch.tensor([0.5, float("nan"), 2.0, 0.3])}, r"scores contain NaN or inf"),
    ({"scores": None, "probabilities": torch.tensor([0.5, 1.5, 0.0, 1.0])},
     r"probabilities must lie in \[0, 1\]"),
    ({"scores": torch.zeros(2, 4), "mixture_weights": torch.tensor([0.5, 0.75])},
     r"mixture_weights must be non-negative and sum to 1.*got sum 1\.25.*divide"),
    ({"scores": torch.zeros(2, 4), "mixture_weights": torch.tensor([1.5, -0.5])},
     r"mixture_weights must be non-negative.*min -0\.5"),
])
def test_check_values_names_the_bad_values(kwargs, message):
    batch = ok(**kwargs)     # shapes are fine: construction makes no device sync
    with pytest.raises(RatesError, match=message):
        batch.check_values()


@pytest.mark.parametrize("values", [["a", "a"], ["Male", "Female", "Male"]])
def test_repeated_value_names_are_refused_and_named(values):
    # a repeated name would read the first code only: the other rows' group is unreachable
    groups = {"sex": torch.tensor([0, 1, 1, 0])}
    with pytest.raises(RatesError, match=r"group_values\['sex'\] repeats the value name "
                                         rf"'{values[0]}' \(codes 0 and {len(values) - 1}\)"
                                         r".*give each code its own name"):
        ok(groups=groups, group_values={"sex": values})


@pytest.mark.parametrize("codes", [torch.tensor([0.0, 1.0, 1.0, 0.0]),
                                   torch.tensor([0.0, 1.0, 2.0, 0.0])])
def test_float_group_codes_are_told_to_be_integers(codes):
    # a float [B] tensor is a single soft membership column; with two value names it can
    # only be integer codes given as floats
    with pytest.raises(RatesError, match=r"group 'sex' is a float tensor of shape \(4,\).*"
                                         r"integer codes.*\.long\(\).*soft memberships"):
        ok(groups={"sex": codes})
    # without value names it is read as one soft column: check_values says codes were meant
    batch = Batch(scores=S, labels=Y, groups={"sex": codes * 2})
    with pytest.raises(RatesError, match=r"memberships must lie in \[0, 1\].*integer codes.*"
                                         r"\.long\(\)"):
        batch.check_values()
    soft = ok(groups={"sex": torch.tensor([[0.2, 0.8], [1.0, 0.0], [0.5, 0.5], [0.0, 1.0]])})
    soft.check_values()                   # valid soft memberships are unchanged


def test_rates_that_need_missing_inputs_name_them():
    real = ok(labels=torch.tensor([0.2, 0.9, 0.5, 0.0]), label_kind="real")
    with pytest.raises(RatesError, match="binary label.*declared 'real'"):
        RateEvaluator([R.true_positive_rate()])(real)
    RateEvaluator([R.group_loss("squared")])(real)   # a group loss is fine on real labels
    with pytest.raises(RatesError, match=r"unknown group attribute 'race'; the batch has \['sex"):
        RateEvaluator([R.error_rate(group("race", "Black"))])(ok())
    with pytest.raises(RatesError, match=r"unknown value 'Other' of group 'sex'.*\['Male', "):
        RateEvaluator([R.error_rate(group("sex", "Other"))])(ok())
    with pytest.raises(RatesError, match=r"code 2 of group 'sex' is out of range 0\.\.1"):
        RateEvaluator([R.error_rate(group("sex", 2))])(ok())
    with pytest.raises(RatesError, match="baseline_scores"):
        RateEvaluator([R.churn_rate()])(ok())
    with pytest.raises(RatesError, match="no sources"):
        RateEvaluator([R.error_rate(R.source("d1"))])(ok())
    probs = ok(scores=None, probabilities=torch.tensor([0.5, 0.1, 0.9, 0.0]))
    with pytest.raises(RatesError, match="threshold events need scores"):
        RateEvaluator(R.score_rates([0.5]))(probs)
    with pytest.raises(RatesError, match="group loss 'logistic' needs scores"):
        RateEvaluator([R.group_loss("logistic")])(probs)


def test_non_finite_scores_are_raised_at_split_evaluation_and_logging_intervals():
    ev = RateEvaluator([R.error_rate()])
    nan_batch = ok(scores=torch.tensor([0.5, float("nan"), 2.0, 0.3]))
    with pytest.raises(NonFiniteScoresError, match="NaN or inf"):
        ev.evaluate_split([ok(), nan_batch])
    ev.train()
    ev(ok())
    ev.check_finite()                      # nothing seen yet
    ev(ok(scores=torch.tensor([0.5, float("inf"), 2.0, 0.3])))   # no exception mid-step
    ev(ok())
    with pytest.raises(NonFiniteScoresError, match="NaN or infinite scores during training"):
        ev.check_finite()
    ev.check_finite()                      # the flag was reset by the check


def test_subset_empty_over_a_whole_split_is_named():
    ev = RateEvaluator([R.true_positive_rate(group("sex", "Female")), R.error_rate()])
    only_male = ok(groups={"sex": torch.tensor([0, 0, 0, 0])})
    ev(only_male)                          # a minibatch: 0, no exception
    with pytest.raises(EmptySubsetError,
                       match=r"no example.*\(group\('sex', 'Female'\) & label\(1\)\)"):
        ev.evaluate_split([only_male, only_male])
    zero_weight = ok(weights=torch.tensor([1.0, 0.0, 0.0, 1.0]))   # Female has weight 0
    with pytest.raises(EmptySubsetError, match=r"group\('sex', 'Female'\)"):
        ev.evaluate_split([zero_weight])
    with pytest.raises(RatesError, match="got no batch"):
        ev.evaluate_split([])


def test_expression_misuse_is_refused():
    a, b = R.true_positive_rate(group("sex", "Male")), R.true_positive_rate(group("sex", "Female"))
    with pytest.raises(TypeError, match="product of two model-dependent expressions"):
        a * b
    with pytest.raises(TypeError, match="only affine expressions can be divided"):
        R.precision() / a
    with pytest.raises(ZeroDivisionError):
        a / 0
    with pytest.raises(TypeError, match="an expression has no truth value"):
        bool(a)
    with pytest.raises(TypeError, match="a constraint has no truth value"):
        bool(a <= b)
    with pytest.raises(TypeError, match="a constraint has no truth value"):
        if a == b:   # the classic mistake: comparing expressions in Python control flow
            pass
    with pytest.raises(ValueError, match="does not depend on the model"):
        _ = R.label_rate(group("sex", "Male")) <= 0.5
    with pytest.raises(ValueError, match="constants must be finite"):
        a + float("inf")
    with pytest.raises(TypeError, match="subsets combine only with subsets"):
        group("sex", "Male") & "Female"
    with pytest.raises(TypeError, match="group value must be a name or an integer code"):
        group("sex", 1.5)
    with pytest.raises(ValueError, match="unknown loss 'huber'"):
        R.group_loss("huber")
    with pytest.raises(ValueError, match="beta must be positive"):
        R.fbeta(0.0)
    with pytest.raises(ValueError, match="threshold must be finite"):
        R.score_rates([float("nan")])
    with pytest.raises(ValueError, match="unknown surrogate 'relu'"):
        RateEvaluator([a], surrogate="relu")
    with pytest.raises(RatesError, match="nothing to evaluate"):
        RateEvaluator([R.as_expression(1.0)])
    with pytest.raises(KeyError, match="was not registered"):
        R.error_rate().evaluate(RateEvaluator([a])(ok()))
