"""``robust=soft_assignments`` on your own table (``data=table``): issue 55's loop
(``data.noise`` → Hydra's ``+data.noise`` → "unknown key(s) ['noise'] for data set 'table'")
is gone: the first message gives the remedy that works for a table, and following it runs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from fairgames.train import ConfigError, run
from fairgames.train.data import load_splits

SHORT = ["trainer=smoke", "trainer.steps=10", "trainer.bootstrap=0", "trainer.checkpoint_every=0",
         "trainer.plots=false", "trainer.tensorboard=false", "problem=equal_opportunity"]


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> list[str]:
    rng = np.random.default_rng(0)
    n = 600
    race = rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2])
    x = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-(x + (race == "a") - 0.5)))).astype(int)
    path = tmp_path_factory.mktemp("table") / "people.csv"
    pd.DataFrame({"x": x, "race": race, "y": y}).to_csv(path, index=False)
    return ["data=table", f"data.path={path}", "data.target=y", "data.protected=race"]


def test_the_first_message_names_the_remedy_that_works_for_a_table(compose_cfg, table):
    with pytest.raises(ConfigError) as caught:
        run(compose_cfg(*table, *SHORT, "robust=soft_assignments"))
    text = str(caught.value)
    assert "data.noise=" in text and "robust=dro robust.gamma=" in text, text
    assert "cannot play" not in text, text       # not the algorithm's fault
    assert "+data.noise" not in text              # the key is the table's own


def test_data_noise_on_a_table_flips_its_groups_and_keeps_the_true_ones(compose_cfg, table):
    noisy = load_splits(compose_cfg(*table, "data.noise=0.2", "data.noise_seed=3").data, 0)
    clean = load_splits(compose_cfg(*table).data, 0)
    flipped = 0
    for a, b in zip(noisy, clean, strict=True):
        assert torch.equal(a.groups["race_true"], b.groups["race"])
        assert torch.equal(a.features, b.features)
        flipped += int((a.groups["race"] != b.groups["race"]).sum())
    assert flipped == math.floor(0.2 * 600)
    assert noisy.metadata["noise"] == {"attribute": "race", "fraction": 0.2, "seed": 3,
                                       "true_attribute": "race_true"}


def test_following_the_remedy_runs_soft_assignments_on_a_table(compose_cfg, table, tmp_path):
    result = run(compose_cfg(*table, *SHORT, "robust=soft_assignments", "data.noise=0.2"),
                 run_dir=tmp_path)
    block = result.results["robust"]
    assert block["method"] == "soft_assignments" and block["true_attribute"] == "race_true"
