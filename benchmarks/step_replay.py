"""Where a step's time goes: its ops, or the Python around them (issue 24).

Each column of ``step_overhead.py`` (linear model, K = 2, SGD, batch 1 024, one thread) is
timed eager and as its own ops replayed: the step recorded once with ``make_fx`` (real
tensors) and its graph run op by op under ``no_grad``, uncompiled — the same aten ops on the
same tensors, with none of the library's Python (records, the round, the players, look-ups,
autograd's Python and engine). ``eager − replay`` is then the Python (and autograd
bookkeeping) a step costs beyond its ops; the replay's own per-op call overhead is the same
for every column. Blocks alternate eager / replay for every column, CPU clock; medians over
the blocks with quartiles.

Goal (diagnostic, issue 24): the game's ``eager − replay`` at most cooper-optim's, i.e. the
game's layers cost no more Python per step than cooper's; when it holds, what remains of the
game's extra over cooper's is in its ops.

Usage::

    python benchmarks/step_replay.py --blocks 5 --steps 1000
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import step_overhead as so  # noqa: E402
from rates_eval import machine  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "step_replay.json"
COLUMNS = ("plain", "game", "lagrangian", "cooper", "floor")


def replayed(step: Callable[[], None]) -> tuple[Callable[[], None], int]:
    """``step``'s ops recorded once (real tensors) and a function that replays them op by
    op, uncompiled; with the number of ops in the graph."""
    from torch.fx.experimental.proxy_tensor import make_fx  # noqa: PLC0415

    graph = make_fx(lambda: step(), tracing_mode="real")()
    n_ops = sum(node.op == "call_function" for node in graph.graph.nodes)

    def replay() -> None:
        with torch.no_grad():
            graph()
    return replay, n_ops


def quartiles(xs: list[float]) -> list[float]:
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return [q[0], statistics.median(xs), q[2]]


def run(blocks: int, steps: int) -> dict:
    """ms per step, eager and replayed, per column (median and quartiles over the blocks)."""
    torch.set_num_threads(1)
    cols, missing = so.make_columns("linear", 2, torch.device("cpu"), True)
    pairs = {}
    for name in (c for c in COLUMNS if c in cols):
        for _ in range(20):
            cols[name]()
        pairs[name] = (cols[name], *replayed(cols[name]))
    times: dict[str, dict[str, list[float]]] = {
        n: {"eager": [], "replay": [], "python": []} for n in pairs}
    for _ in range(blocks):
        for name, (eager, replay, _) in pairs.items():
            block = {}
            for which, f in (("eager", eager), ("replay", replay)):
                for _ in range(max(5, steps // 10)):
                    f()
                t0 = time.process_time()
                for _ in range(steps):
                    f()
                block[which] = (time.process_time() - t0) / steps * 1e3
            for which in ("eager", "replay"):
                times[name][which].append(block[which])
            times[name]["python"].append(block["eager"] - block["replay"])
    return {"cooper_missing": missing, "columns": {
        n: {"graph_ops": pairs[n][2], **{k: quartiles(v) for k, v in t.items()}}
        for n, t in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    out = run(args.blocks, args.steps)
    cols = out["columns"]
    print(f"{'column':11s} {'ops':>4s} {'eager ms':>9s} {'replay ms':>10s} "
          f"{'eager - replay ms [q1, q3]':>28s}")
    for n, c in cols.items():
        q1, med, q3 = c["python"]
        print(f"{n:11s} {c['graph_ops']:4d} {c['eager'][1]:9.3f} {c['replay'][1]:10.3f} "
              f"{med:12.3f} [{q1:.3f}, {q3:.3f}]")
    if "cooper" in cols:
        game, cooper = cols["game"]["python"][1], cols["cooper"]["python"][1]
        out["goals"] = {"game_python_at_most_coopers": {
            "game_ms": game, "cooper_ms": cooper, "passed": game <= cooper}}
        print(f"goal: game's eager - replay {game:.3f} ms <= cooper's {cooper:.3f} ms: "
              f"{'PASS' if game <= cooper else 'FAIL'}")
    out.update(blocks=args.blocks, steps=args.steps, clock="cpu (process_time)",
               machine=machine(torch.device("cpu"), 1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
