"""On a CUDA device: a training step makes no host-device sync (CUDA's sync debug mode set
to "error", plus the dispatch-mode guard), and a whole run from the config matches the CPU
run's contract."""

from __future__ import annotations

import pytest
import torch

from fairgames.data import make_synthetic
from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.problems import load_problem
from fairgames.rates import no_host_sync
from fairgames.train import BatchSettings, Engine, GameData, LogSettings, SnapshotSettings, run

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _engine(problem: str, batch_size: int | None, optimizer: str, heldout: bool = False
            ) -> Engine:
    splits = make_synthetic(n=3000, d=8, seed=0).to("cuda")
    built = load_problem(problem).build("group", splits.train.group_names, None,
                                        splits.train.group_counts("group"))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 1)).cuda()
    opt = (torch.optim.SGD(model.parameters(), lr=0.1) if optimizer == "sgd"
           else torch.optim.Adam(model.parameters(), lr=0.01))
    copt = ConstrainedOptimizer(Problem(built.objective, built.constraints), opt)
    data = GameData(splits.train, "group", heldout=splits.validation if heldout else None)
    return Engine(model, copt, data, steps=100, batches=BatchSettings(size=batch_size),
                  logging=LogSettings(every=1000),
                  snapshots=SnapshotSettings(every=2, max_kept=4))


@pytest.mark.parametrize("problem, batch_size, heldout", [
    ("equal_opportunity", None, False), ("fmeasure_parity", 256, False), ("kld", 256, False),
    # the two-dataset game: the validation split scored at every step, whole or minibatched
    ("equal_opportunity", None, True), ("fmeasure_parity", 256, True)])
def test_steps_on_cuda_make_no_sync(problem, batch_size, heldout):
    engine = _engine(problem, batch_size, "sgd", heldout)
    engine.train_step()
    torch.cuda.synchronize()
    with no_host_sync():                 # dispatch guard + CUDA sync debug mode "error"
        for _ in range(20):
            engine.train_step()
    torch.cuda.synchronize()
    assert engine.step == 21


def test_adam_steps_on_cuda_make_no_device_sync():
    # Adam reads its step counter from a host tensor (no device wait): only CUDA's own sync
    # detector applies.
    engine = _engine("equal_opportunity", 256, "adam")
    engine.train_step()
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(20):
            engine.train_step()
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    assert engine.step == 21


def test_a_config_run_on_cuda(compose_cfg, tmp_path):
    cfg = compose_cfg("data=synthetic", "data.n=3000", "data.group_shift=1.5", "trainer=smoke",
                      "trainer.device=cuda", "trainer.steps=200", "optimizer.lr=0.05",
                      "trainer.selection_split=train")
    result = run(cfg, run_dir=tmp_path)
    res = result.results
    assert res["env"]["device"].startswith("NVIDIA")
    best = res["solutions"]["best_iterate"]["train"]
    assert max(c["violation"] for c in best["constraints"].values()) <= 1e-9
    assert (tmp_path / "results.json").is_file() and (tmp_path / "stochastic.pt").is_file()
