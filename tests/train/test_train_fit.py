"""`fit` with a user's module and a ready `Problem`, tolerance overrides, epochs and
group-balanced minibatches."""

from __future__ import annotations

import math

import jsonschema
import numpy as np
import pytest
import torch
from sklearn.metrics import recall_score

from fairgames.data import make_synthetic
from fairgames.game import Problem
from fairgames.rates import error_rate, group, true_positive_rate
from fairgames.train import fit, load_schema, run


def test_fit_with_a_ready_problem_and_a_user_module(tmp_path):
    splits = make_synthetic(n=1500, d=4, group_shift=1.5, seed=1)
    tpr = lambda v: true_positive_rate(group("group", v))  # noqa: E731
    problem = Problem(error_rate(), [(tpr("1") >= tpr("0") - 0.1).named("gap")])
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    result = fit(model, problem, splits, protected="group",
                 optimizer=torch.optim.SGD(model.parameters(), lr=0.2),
                 trainer={"steps": 40, "log_every": 20}, run_dir=tmp_path)
    assert result.model is model                    # the user's module is trained in place
    jsonschema.validate(result.results, load_schema())
    ds = splits.validation
    with torch.no_grad():
        p = (model(ds.features).squeeze(-1) > 0).numpy()
    y, g = ds.labels.numpy(), ds.groups["group"].numpy()
    value = result.results["solutions"]["final"]["validation"]["constraints"]["gap"]["value"]
    assert value == pytest.approx(recall_score(y[g == 0], p[g == 0])
                                  - recall_score(y[g == 1], p[g == 1]) - 0.1, abs=1e-9)
    assert (tmp_path / "report.md").is_file() and (tmp_path / "stochastic.pt").is_file()


def test_fit_overrides_the_catalog_tolerance():
    splits = make_synthetic(n=800, d=3, seed=2)
    result = fit(torch.nn.Linear(3, 1), "demographic_parity", splits, protected="group",
                 tolerance=0.2, trainer={"steps": 10, "log_every": 10})
    m = result.results["solutions"]["final"]["test"]
    rates = m["groups"]
    ref = rates["overall"]["positive_rate"] - rates["group=1"]["positive_rate"] - 0.2
    assert m["constraints"]["ppr_low[1]"]["value"] == pytest.approx(ref, abs=1e-9)
    assert result.results["config"]["problem"]["tolerance"] == 0.2


def test_epochs_and_balanced_batches(compose_cfg, tmp_path):
    cfg = compose_cfg("data=synthetic", "data.n=500", "data.group_proportions=[0.8,0.2]",
                      "trainer=smoke", "trainer.steps=null", "trainer.epochs=2",
                      "trainer.batch_size=64", "trainer.balanced_batches=true",
                      "problem=equal_opportunity")
    result = run(cfg, run_dir=tmp_path)
    n_train = len(make_synthetic(n=500, d=10, group_proportions=(0.8, 0.2), seed=0).train)
    assert result.results["training"]["steps"] == 2 * math.ceil(n_train / 64)
    sampler = result.engine.sampler
    index = next(sampler)
    codes = result.engine.train.groups["group"][index]
    assert torch.bincount(codes).tolist() == [32, 32]          # balanced batches
    w = sampler.importance_weights(index).numpy()
    shares = np.bincount(result.engine.train.groups["group"].numpy()) / n_train
    assert w[codes.numpy() == 1][0] == pytest.approx(shares[1] / 0.5)
