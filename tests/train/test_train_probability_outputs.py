"""A candidate model may declare its outputs P(ŷ = 1) of a randomised prediction
(``outputs_probabilities``): the run's evaluator then reads them in expectation, exactly
(numpy reference), for one model and for a mixture; a metric reading more than the
predictions is refused rather than read wrongly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fairgames.data import make_synthetic
from fairgames.rates import error_rate, group
from fairgames.rates import positive_prediction_rate as ppr
from fairgames.train.evaluation import SolutionEvaluator, outputs_probabilities


def test_probability_outputs_are_evaluated_in_expectation():
    ds = make_synthetic(n=300, seed=0).train
    fair = (ppr(group("group", "0")) >= 0.8 * ppr(group("group", "1"))).named("fair")
    view = SolutionEvaluator(error_rate(), [fair], "group", probabilities=True)
    p = torch.rand(len(ds), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    out = view.evaluate(ds, p.float())
    pn, y, g = p.float().double().numpy(), ds.labels.numpy(), ds.groups["group"].numpy()
    code = {str(n): k for k, n in enumerate(ds.group_names["group"])}
    assert out["objective"] == pytest.approx(np.mean(np.where(y == 1, 1 - pn, pn)), abs=1e-9)
    assert out["constraints"]["fair"]["value"] == pytest.approx(
        0.8 * pn[g == code["1"]].mean() - pn[g == code["0"]].mean(), abs=1e-9)
    two = torch.stack([p.float(), 1 - p.float()])          # a mixture: Σ q_r p_r
    q = torch.tensor([0.25, 0.75])
    mixed = view.evaluate(ds, two, mixture_weights=q)
    pm = 0.25 * pn + 0.75 * (1 - p.float()).double().numpy()
    assert mixed["objective"] == pytest.approx(np.mean(np.where(y == 1, 1 - pm, pm)), abs=1e-9)


def test_the_declaration_is_a_module_attribute_and_defaults_to_scores():
    class Ramp(torch.nn.Identity):
        outputs_probabilities = True

    assert outputs_probabilities(Ramp()) and not outputs_probabilities(torch.nn.Linear(2, 1))
