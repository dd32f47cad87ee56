"""Data-parallel games (fairgames.game.distributed): two gloo processes, each on its shard,
play the game of one process on the concatenated batch — with one collective per step."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.noisy_groups import SoftAssignmentPlayer
from fairgames.noisy_groups.dro import DROPlayer
from fairgames.rates import error_rate, group, true_positive_rate

WORKER = Path(__file__).with_name("ddp_game_worker.py")


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    """The worker's results: ``rank0``, ``rank1`` and the one-process ``reference``."""
    out = tmp_path_factory.mktemp("ddp")
    store = str(out / "store")
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]),
                                          os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(out), str(rank), "2", store],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
             for rank in (0, 1, -1)]
    for p in procs:
        output, _ = p.communicate(timeout=240)
        assert p.returncode == 0, output
    return {name: torch.load(out / f"{name}.pt") for name in ("rank0", "rank1", "reference")}


def _tensors(tree, prefix=""):
    """Every floating-point tensor of a nested state, by path."""
    if isinstance(tree, torch.Tensor):
        return {prefix: tree} if tree.is_floating_point() else {}
    if isinstance(tree, dict):
        items = tree.items()
    elif isinstance(tree, list | tuple):
        items = enumerate(tree)
    else:
        return {}
    out = {}
    for key, value in items:
        out.update(_tensors(value, f"{prefix}/{key}"))
    return out


GAMES = ["proxy_lagrangian", "lagrangian_slacks", "group_loss", "sources"]


@pytest.mark.parametrize("game", GAMES)
def test_every_rank_plays_the_one_process_game_on_the_concatenated_batch(played, game):
    # uneven shards (150 / 90 rows), group "c" absent from rank 1's: every rank's θ,
    # multipliers, slacks and running estimates are the same, and the single process's
    # (group_loss: a hinge-loss objective takes the general, op-by-op pass; sources: goals
    # on three source data sets, the unlabeled one absent from rank 1's shard, paper 001)
    ranks = [_tensors(played[r][game]) for r in ("rank0", "rank1")]
    reference = _tensors(played["reference"][game])
    assert set(ranks[0]) == set(reference)
    assert any("/multipliers/" in k for k in reference) and any("/theta/" in k for k in reference)
    if game == "lagrangian_slacks":
        assert "/players/slacks/slacks" in reference
        assert reference["/players/multipliers/lam"].abs().sum() > 0    # the game is active
    if game == "sources":      # the constraints on d3, absent from rank 1's shard, bind:
        # the swap-regret multipliers' distribution weighs coverage_d3 and churn_d3
        assert (reference["/players/multipliers/v"][2:] > 0.01).all()
    for key, ref in reference.items():
        assert torch.equal(ranks[0][key], ranks[1][key]), key
        torch.testing.assert_close(ranks[0][key], ref, rtol=0, atol=1e-6, msg=key)


@pytest.mark.parametrize("game", GAMES)
def test_the_game_makes_one_collective_per_step(played, game):
    # DDP's gradient buckets go through its C++ reducer, not torch.distributed.all_reduce:
    # the count is the game's own (50 steps, the last 49 inside no_host_sync())
    for rank in ("rank0", "rank1"):
        assert played[rank][game]["collectives"] == [1] * 50


@pytest.fixture
def one_process_group():
    """A one-rank gloo group in this process (what the refusals need)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _problem() -> Problem:
    return Problem(error_rate(), [true_positive_rate(group("g", "b")) >= 0.5])


def _sgd() -> torch.optim.Optimizer:
    return torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)


def test_a_process_group_needs_torch_distributed_initialised():
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="init_process_group"):
        ConstrainedOptimizer(_problem(), _sgd(), process_group="default")


def test_an_unknown_process_group_name_is_refused(one_process_group):
    with pytest.raises(ValueError, match="'default'"):
        ConstrainedOptimizer(_problem(), _sgd(), process_group="world")


def test_the_dro_player_refuses_a_process_group(one_process_group):
    dro = DROPlayer("g", torch.tensor([0, 1, 1, 0]), gamma=0.1)
    with pytest.raises(ValueError, match=r"player 'dro' \(DROPlayer\).*process_group=None"):
        ConstrainedOptimizer(_problem(), _sgd(), preset="lagrangian", players=[dro],
                             process_group="default")


def test_the_soft_assignment_player_refuses_a_process_group(one_process_group):
    soft = SoftAssignmentPlayer("g", torch.tensor([[0.8, 0.3], [0.2, 0.7]]))
    problem = Problem(error_rate(), [true_positive_rate(group("g", "1")) >= 0.5])
    with pytest.raises(ValueError, match="'soft_assignments'.*per-example"):
        ConstrainedOptimizer(problem, _sgd(), preset="lagrangian", players=[soft],
                             process_group="default")


@pytest.mark.parametrize("case", ["loss", "objective_surrogate", "best_response"])
def test_what_the_collective_cannot_reduce_is_refused(one_process_group, case):
    tpr = [true_positive_rate(group("g", "b")) >= 0.5]
    if case == "loss":
        problem = Problem(error_rate(), tpr, loss=lambda s, b: s.square().mean())
        match = "Problem\\(loss=...\\)"
    elif case == "objective_surrogate":
        problem = Problem(error_rate(), tpr, objective_surrogate="logistic")
        match = "objective_surrogate"
    else:
        problem, match = Problem(error_rate(), tpr), "inside step"
    theta = "best_response" if case == "best_response" else None
    with pytest.raises(ValueError, match=match):
        ConstrainedOptimizer(problem, _sgd(), theta=theta, process_group="default")
