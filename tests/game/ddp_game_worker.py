"""One process of the data-parallel game test (tests/game/test_game_distributed.py).

``python ddp_game_worker.py OUT RANK WORLD STORE`` plays 50 steps of two games on this rank's
shard of a fixed global batch under ``DistributedDataParallel`` with
``ConstrainedOptimizer(process_group="default")`` (gloo, one torch thread) and saves the
final state to ``OUT/rank<RANK>.pt``; ``RANK = -1`` plays the same games in one process on
the concatenated batch (the reference, ``OUT/reference.pt``). The ranks meet through the
file ``STORE`` (a ``file://`` rendezvous: no port to race for). The shards are uneven (150 and
90 rows) and group ``c`` has no row on rank 1. Steps after the first run under
``no_host_sync()``, and the game's ``all_reduce`` calls are counted per step. The ``sources``
game states its goals on three source data sets (paper 001): errors on ``d1``, recall on
``d2``, coverage and churn on the unlabeled ``d3``, which has no row on rank 1.
"""

from __future__ import annotations

import sys
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist

from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.rates import (
    Batch,
    churn_rate,
    coverage,
    error_rate,
    fmeasure,
    group,
    group_loss,
    no_host_sync,
    source,
    true_positive_rate,
)
from fairgames.train.loop.parallel import leave

STEPS = 50
SHARDS = (150, 90)
GAMES = {
    # the default preset (swap-regret multipliers) on three TPR constraints
    "proxy_lagrangian": ({}, False),
    # gradient-ascent multipliers and OGD ratio slacks on an F1 parity constraint
    "lagrangian_slacks": ({"preset": "lagrangian", "ratio_slacks": "num_den"}, True),
    # a group-loss objective: the evaluator's general (op-by-op) pass, not the fused one
    "group_loss": ({"preset": "lagrangian"}, False),
    # several source data sets (paper 001), one unlabeled and absent from rank 1's shard
    "sources": ({}, False),
}
SOURCES = ["d1", "d2", "d3"]


def global_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Features, labels and group codes of the 240 rows; group 2 ('c') only in shard 0."""
    g = torch.Generator().manual_seed(0)
    n0, n1 = SHARDS
    x = torch.randn(n0 + n1, 4, generator=g)
    y = (x[:, 0] + 0.5 * torch.randn(n0 + n1, generator=g) > 0).float()
    groups = torch.cat([torch.randint(0, 3, (n0,), generator=g),
                        torch.randint(0, 2, (n1,), generator=g)])
    return x, y, groups


def global_sources() -> tuple[torch.Tensor, torch.Tensor]:
    """Source ids of the 240 rows (source 2, the unlabeled 'd3', only in shard 0) and a
    deployed model's scores (churn's baseline)."""
    g = torch.Generator().manual_seed(1)
    n0, n1 = SHARDS
    src = torch.cat([torch.randint(0, 3, (n0,), generator=g),
                     torch.randint(0, 2, (n1,), generator=g)])
    x = global_batch()[0]
    return src, x @ torch.tensor([1.0, -0.5, 0.25, 0.0]) + 0.1


def batch(name: str, scores: torch.Tensor, rows: slice) -> Batch:
    """This shard's batch of the game ``name``: groups, or sources (d3's labels zeroed: it
    is unlabeled) with the deployed model's scores."""
    _, y, codes = (t[rows] for t in global_batch())
    if name != "sources":
        return Batch(scores=scores, labels=y, groups={"g": codes},
                     group_values={"g": ["a", "b", "c"]})
    src, base = (t[rows] for t in global_sources())
    return Batch(scores=scores, labels=torch.where(src == 2, 0.0, y), sources=src,
                 source_names=SOURCES, unlabeled_sources=("d3",), baseline_scores=base)


def problem(name: str, with_ratio: bool) -> Problem:
    tpr = [(true_positive_rate(group("g", v)) >= true_positive_rate() - 0.05).named(f"tpr_{v}")
           for v in ("a", "b", "c")]
    if with_ratio:
        tpr.append((fmeasure(group("g", "a")) >= fmeasure() - 0.02).named("f1_a"))
    if name == "group_loss":
        return Problem(group_loss("hinge", group("g", "a")), tpr)
    if name == "sources":
        return Problem(error_rate(source("d1")), [
            (true_positive_rate(source("d2")) >= 0.8).named("recall_d2"),
            (coverage(source("d3")) <= 0.3).named("coverage_d3"),
            (churn_rate(source("d3")) <= 0.1).named("churn_d3")])
    return Problem(error_rate(), tpr)


def play(name: str, rows: slice, distributed: bool) -> dict:
    options, with_ratio = GAMES[name]
    x = global_batch()[0][rows]
    torch.manual_seed(1)
    model = torch.nn.Linear(4, 1)
    net = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
    sgd = torch.optim.SGD(model.parameters(), lr=0.5)
    copt = ConstrainedOptimizer(problem(name, with_ratio), sgd,
                                process_group="default" if distributed else None, **options)
    counts = []
    real = dist.all_reduce
    calls = [0]

    def counting(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    dist.all_reduce = counting
    try:
        for step in range(STEPS):
            calls[0] = 0
            with no_host_sync() if step else nullcontext():
                copt.zero_grad()
                copt.lagrangian(batch(name, net(x)[:, 0], rows)).backward()
                copt.step()
            counts.append(calls[0])
    finally:
        dist.all_reduce = real
    state = copt.state_dict()
    return {"theta": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "players": {k: v for k, v in state["players"].items() if k != "theta"},
            "evaluator": state["evaluator"], "collectives": counts,
            "objective": copt.last.objective_true.clone()}


def main() -> None:
    out, rank, world, store = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    torch.set_num_threads(1)
    if rank < 0:
        results = {name: play(name, slice(None), False) for name in GAMES}
        torch.save(results, out / "reference.pt")
        return
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world)
    finished = False
    try:
        start = sum(SHARDS[:rank])
        rows = slice(start, start + SHARDS[rank])
        results = {name: play(name, rows, True) for name in GAMES}
        torch.save(results, out / f"rank{rank}.pt")
        finished = True
    finally:
        leave(finished=finished)     # the library's own teardown (a barrier, then destroy)


if __name__ == "__main__":
    main()
