"""The engine stops at a log step after a non-finite step, naming the step and the latest
checkpoint; the skipped step left the model and the multipliers as they were."""

from __future__ import annotations

import pytest
import torch

from fairgames.data import make_synthetic
from fairgames.game import ConstrainedOptimizer, NonFiniteStepError, Problem
from fairgames.rates import error_rate, group, true_positive_rate
from fairgames.train.loop.checkpoint import load_checkpoint
from fairgames.train.loop.engine import CheckpointSettings, Engine, GameData, LogSettings


class Exploding(torch.nn.Module):
    """A linear model whose training-mode forward ``bad`` (0-based) returns a NaN score."""

    def __init__(self, d: int, bad: int) -> None:
        super().__init__()
        self.linear, self.calls, self.bad = torch.nn.Linear(d, 1), 0, bad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.linear(x)
        if self.training:
            if self.calls == self.bad:
                out = out * torch.where(torch.arange(len(x)) == 3, float("nan"), 1.0)[:, None]
            self.calls += 1
        return out


def test_the_engine_stops_naming_the_step_and_the_checkpoint(tmp_path):
    train = make_synthetic(n=600, d=3, seed=0).train
    torch.manual_seed(0)
    model = Exploding(3, bad=6)          # the 7th step (engine step 7) meets a NaN score
    tpr = lambda v: true_positive_rate(group("group", v))  # noqa: E731
    problem = Problem(error_rate(), [(tpr("1") >= tpr("0") - 0.05).named("eo")])
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1))
    engine = Engine(model, copt, GameData(train, "group"), steps=20,
                    logging=LogSettings(every=8),
                    checkpoints=CheckpointSettings(every=4, run_dir=tmp_path))
    with pytest.raises(NonFiniteStepError) as info:
        engine.run()
    message = str(info.value)
    assert "training stopped at step 8: step 7 met non-finite scores, loss" in message
    assert f"the latest checkpoint is {tmp_path / 'checkpoint.pt'} (step 4;" in message
    assert "Remedy: lower the learning rate" in message
    assert engine.step == 8 and len(engine.history) == 0      # nothing logged past the stop
    # the model at step 8 is where 7 good steps took it: the bad one left no trace
    saved = load_checkpoint(tmp_path / "checkpoint.pt")["engine"]
    assert saved["step"] == 4
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert torch.isfinite(copt.weights()[1]).all()
