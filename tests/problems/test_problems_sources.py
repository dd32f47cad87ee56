"""``source=`` in problem statements against the data's sources (paper 001): a label rate on an
unlabeled source and ``source=`` on one-source data are refused before training, at the token;
a run's problem stage passes the training split's sources; a named source with no row over the
training split is an error naming it and the split."""

from __future__ import annotations

import pytest
import torch

from fairgames.data import combine_splits, make_synthetic
from fairgames.problems import ProblemSpec, ProblemSyntaxError
from fairgames.problems.compiler import Environment, compile_constraint
from fairgames.rates import EmptySubsetError
from fairgames.train.data import make_batch
from fairgames.train.subsets import require_training_subsets, statements

ENV = Environment("group", {"group": ["0", "1"]}, {}, sources=["d1", "d2", "d3"],
                  unlabeled=["d3"])


@pytest.mark.parametrize("text", ["tpr(source='d3') >= 0.5", "error() <= 0.3",
                                  "ppr(source='d3', label=1) <= 0.5",
                                  "fmeasure(source='d3') >= 0.5"])
def test_a_label_rate_on_an_unlabeled_source_is_refused_at_its_token(text):
    with pytest.raises(ProblemSyntaxError, match=r"reads labels.*'d3'.*source=\"d1\"") as e:
        compile_constraint(text, ENV, "c")
    assert "^" in str(e.value)        # the token is underlined


@pytest.mark.parametrize("text", ["coverage(source='d3') <= 0.4", "churn(source='d3') <= 0.1",
                                  "tpr(source='d2') >= 0.5", "error(source='d1') <= 0.3",
                                  "ppr(source='d3', group=1) <= ppr(source='d3', group=0)"])
def test_label_free_rates_on_an_unlabeled_source_and_label_rates_elsewhere_compile(text):
    c, = compile_constraint(text, ENV, "c")
    assert "d" in str(c.expression)


def test_source_on_one_source_data_names_the_remedy():
    env = Environment("group", {"group": ["0", "1"]}, {}, sources=[])
    with pytest.raises(ProblemSyntaxError, match="one data set.*several sources"):
        compile_constraint("ppr(source='d2') <= 0.5", env, "c")


SPEC = ProblemSpec(name="several", objective="error(source='d1')",
                   constraints={"recall": "tpr(source='d2') >= 0.6",
                                "coverage": "coverage(source='d3') <= 0.5"})


def several(unlabeled=("d3",)):
    parts = {n: make_synthetic(n=120, seed=i) for i, n in enumerate(["d1", "d2", "d3"])}
    return combine_splits(parts, unlabeled=unlabeled).train


def test_the_problem_stage_checks_source_against_the_training_split():
    train = several()
    objective, constraints = statements(SPEC, train, "group")
    assert "source('d2')" in str(constraints[0].expression)
    bad = ProblemSpec(name="bad", objective="error()", constraints={"c": "tpr(source='d2') >= 0.6"})
    with pytest.raises(ProblemSyntaxError, match="unlabeled source 'd3'|'d3'.*unlabeled"):
        statements(bad, train, "group")
    typo = ProblemSpec(name="typo", objective="error(source='d1')",
                       constraints={"c": "tpr(source='d4') >= 0.6"})
    with pytest.raises(ProblemSyntaxError, match="unknown source 'd4'"):
        statements(typo, train, "group")
    one = make_synthetic(n=120, seed=0).train
    with pytest.raises(ProblemSyntaxError, match="one data set.*several sources"):
        statements(SPEC, one, "group")


def test_make_batch_carries_the_unlabeled_sources():
    train = several()
    batch = make_batch(train, torch.zeros(len(train)))
    assert batch.unlabeled_sources == ("d3",)


def test_a_named_source_with_no_training_row_is_an_error_naming_it_and_the_split():
    train = several()
    keep = torch.nonzero(train.sources != 1).flatten()        # no row of d2
    with pytest.raises(EmptySubsetError, match=r"training split.*source\('d2'\).*'d2': 0"):
        require_training_subsets(SPEC, train.subset(keep), "group")
