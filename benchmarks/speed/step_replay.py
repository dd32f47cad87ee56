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

``--ops N``: each op of the recorded graphs (game and cooper) timed where it runs — the graph
run whole N times through an interpreter that clocks each op's own call (median over runs) —
and alone (200 calls in a row on the same arguments, median of 5 such): an op whose time in
its graph is well above its time alone pays for what the ops around it leave cold, not for
its own arithmetic (issue 24, round 3). The thread's CPU clock (a shared machine's other jobs
do not count); printed sorted by the in-graph time, and summed.

Usage::

    python -m benchmarks.speed.step_replay --blocks 5 --steps 1000
    python -m benchmarks.speed.step_replay --blocks 2 --steps 10 --ops 1000 --out /tmp/ops.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.harness.blocks import blocks as block_times
from benchmarks.harness.machine import machine
from benchmarks.harness.results import goal, print_goals, write_run
from benchmarks.harness.stats import quartiles
from benchmarks.speed import step_overhead as so

RESULTS = Path(__file__).resolve().parents[1] / "results" / "step_replay.json"
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


def op_costs(step: Callable[[], None], runs: int) -> list[dict]:
    """Each op of ``step``'s recorded graph: its time in the graph run whole (µs, median over
    ``runs``) and alone (µs, median of 5 × 200 calls on the same arguments)."""
    from torch.fx import Interpreter  # noqa: PLC0415
    from torch.fx.experimental.proxy_tensor import make_fx  # noqa: PLC0415

    graph = make_fx(lambda: step(), tracing_mode="real")()
    seen: dict[str, list[float]] = {}
    rows: dict[str, dict] = {}

    class Clocked(Interpreter):
        def run_node(self, n):  # type: ignore[no-untyped-def]
            if n.op != "call_function":
                return super().run_node(n)
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            t0 = time.thread_time()
            out = n.target(*args, **kwargs)
            seen.setdefault(n.name, []).append((time.thread_time() - t0) * 1e6)
            if n.name not in rows:
                rows[n.name] = {"op": str(n.target), "args": _shapes(args),
                                "alone_us": _alone(n.target, args, kwargs)}
            return out

    with torch.no_grad():
        for _ in range(runs):
            Clocked(graph).run()
    return [{**rows[k], "in_graph_us": statistics.median(v)} for k, v in seen.items()]


def _alone(f: Callable, args: tuple, kwargs: dict) -> float:
    ts = []
    for _ in range(5):
        t0 = time.thread_time()
        for _ in range(200):
            f(*args, **kwargs)
        ts.append((time.thread_time() - t0) / 200 * 1e6)
    return statistics.median(ts)


def _shapes(args: tuple) -> str:
    flat = [a for x in args for a in (x if isinstance(x, (list, tuple)) else [x])]
    return " ".join(f"{str(a.dtype)[6:]}{list(a.shape)}" for a in flat
                    if isinstance(a, torch.Tensor))


def run(blocks: int, steps: int) -> dict:
    """ms per step, eager and replayed, per column (median and quartiles over the blocks)."""
    torch.set_num_threads(1)
    cols, missing = so.make_columns("linear", 2, torch.device("cpu"), True)
    pairs = {}
    for name in (c for c in COLUMNS if c in cols):
        for _ in range(20):
            cols[name]()
        pairs[name] = (cols[name], *replayed(cols[name]))
    # every column eager then replayed, block by block (CPU clock: one thread)
    steps_of = {f"{n}/{which}": f for n, (eager, replay, _) in pairs.items()
                for which, f in (("eager", eager), ("replay", replay))}
    ms = block_times(steps_of, steps, blocks, "cpu", block_warmup=max(5, steps // 10))
    times = {n: {"eager": ms[f"{n}/eager"], "replay": ms[f"{n}/replay"],
                 "python": [e - r for e, r in zip(ms[f"{n}/eager"], ms[f"{n}/replay"],
                                                   strict=True)]} for n in pairs}
    return {"cooper_missing": missing, "columns": {
        n: {"graph_ops": pairs[n][2], **{k: list(quartiles(v)) for k, v in t.items()}}
        for n, t in times.items()}}


def print_ops(runs: int) -> dict[str, list[dict]]:
    """:func:`op_costs` of the game and cooper columns, printed with their sums."""
    cols, _ = so.make_columns("linear", 2, torch.device("cpu"), True)
    out = {}
    for name in (c for c in ("game", "cooper") if c in cols):
        for _ in range(20):
            cols[name]()
        ops = out[name] = op_costs(cols[name], runs)
        print(f"{name}: {len(ops)} ops, in graph {sum(o['in_graph_us'] for o in ops):.0f} µs, "
              f"alone {sum(o['alone_us'] for o in ops):.0f} µs")
        for o in sorted(ops, key=lambda o: -o["in_graph_us"])[:25]:
            print(f"  {o['in_graph_us']:6.2f} {o['alone_us']:6.2f}  {o['op']:40s} {o['args'][:60]}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--ops", type=int, default=0,
                        help="runs of the per-op timing of game and cooper (0: none)")
    args = parser.parse_args()
    out = run(args.blocks, args.steps)
    if args.ops:
        out["ops"] = print_ops(args.ops)
    cols = out["columns"]
    print(f"{'column':11s} {'ops':>4s} {'eager ms':>9s} {'replay ms':>10s} "
          f"{'eager - replay ms [q1, q3]':>28s}")
    for n, c in cols.items():
        q1, med, q3 = c["python"]
        print(f"{n:11s} {c['graph_ops']:4d} {c['eager'][1]:9.3f} {c['replay'][1]:10.3f} "
              f"{med:12.3f} [{q1:.3f}, {q3:.3f}]")
    if "cooper" in cols:
        game, cooper = cols["game"]["python"][1], cols["cooper"]["python"][1]
        # value: the game's eager - replay ms; target: cooper's (medians over blocks)
        out["goals"] = {"game_python_at_most_coopers": goal(
            game, cooper, unit="ms", statistic="median over blocks of eager - replay")}
        print_goals(out["goals"])
    out.update(blocks=args.blocks, steps=args.steps, clock="cpu (process_time)",
               machine=machine(torch.device("cpu"), 1))
    write_run(args.out, out, indent=1)


if __name__ == "__main__":
    main()
