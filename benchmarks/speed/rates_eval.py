"""Time to evaluate K group rates in one fused pass, beside one BCE step of a linear model.

For K ∈ {1, 10, 100, 1 000, 10 000} rates (the TPR of each value of one group attribute with K
values: 2K cells of the label × group partition) on B ∈ {1 024, 65 536} examples with 100
features, three columns are timed per (K, B):

* ``bce``: a linear model's forward, the BCE loss and its backward (the reference cost);
* ``rates``: the linear model's forward, the fused rate pass in training mode (true rates,
  surrogate bounds, running denominators) and the backward of the sum of the upper surrogates;
* ``true``: the linear model's forward and the true rates only, under ``torch.no_grad()``.

Goal (issue 3, a benchmark target, not a test): the pass stays flat as K grows: ``rates`` and
``true`` at K = 1 000 cost at most 2× their K = 1 time, at both batch sizes. The compile time of
each evaluation plan (once per batch layout, outside the timed loop) is reported beside.

Statistic: the median of ``torch.utils.benchmark.Timer.blocked_autorange`` blocks after explicit
warm-up calls (and one discarded warm-up case per batch size), with the thread count set
explicitly (``--threads``, recorded in the results).

Usage::

    python -m benchmarks.speed.rates_eval                 # full table → results/rates_eval.cpu.json
    python -m benchmarks.speed.rates_eval --device cuda   # → results/rates_eval.cuda.json
    python -m benchmarks.speed.rates_eval --quick  # smoke run → results/rates_eval.cpu.quick.json
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.benchmark import Timer

from benchmarks.harness.machine import machine
from benchmarks.harness.results import goal, print_goals, write_run
from fairgames.rates import Batch, RateEvaluator, group, true_positive_rate

RESULTS = Path(__file__).resolve().parents[1] / "results"
FEATURES = 100
GOAL_RATIO, GOAL_K = 2.0, 1000


def median_ms(fn: Callable[[], None], threads: int, min_run_time: float, warmup: int) -> float:
    """Median time of ``fn`` in ms (``Timer`` synchronises CUDA around its blocks)."""
    for _ in range(warmup):
        fn()
    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
    return timer.blocked_autorange(min_run_time=min_run_time).median * 1e3


def make_data(b: int, k: int, device: torch.device, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(b, FEATURES, generator=gen)
    y = (x[:, 0] + 0.5 * torch.randn(b, generator=gen) > 0).float()
    g = torch.randint(0, k, (b,), generator=gen)
    return x.to(device), y.to(device), g.to(device), [f"v{i}" for i in range(k)]


def bench_case(b: int, k: int, device: torch.device, threads: int, min_run_time: float,
               warmup: int) -> dict[str, float]:
    x, y, g, names = make_data(b, k, device)
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1).to(device)
    fields = {"labels": y, "groups": {"g": g}, "group_values": {"g": names}}
    ev = RateEvaluator([true_positive_rate(group("g", v)) for v in names]).to(device).train()

    def bce() -> None:
        model.zero_grad(set_to_none=True)
        F.binary_cross_entropy_with_logits(model(x)[:, 0], y).backward()

    def rates() -> None:
        model.zero_grad(set_to_none=True)
        values = ev(Batch(scores=model(x)[:, 0], **fields))
        values.upper.sum().backward()

    def true_only() -> None:
        with torch.no_grad():
            _ = ev(Batch(scores=model(x)[:, 0], **fields), update=False).true

    t0 = time.perf_counter()
    rates()                                     # compiles the plan for this batch layout
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    compile_s = time.perf_counter() - t0
    return {"bce": median_ms(bce, threads, min_run_time, warmup),
            "rates": median_ms(rates, threads, min_run_time, warmup),
            "true": median_ms(true_only, threads, min_run_time, warmup),
            "compile_s": compile_s}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: K in {1, 10, 1000}, B = 1024, short timing blocks")
    parser.add_argument("--device", choices=["cpu", "cuda"],
                        default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's current setting)")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: results/rates_eval.<device>.json "
                             "(results/rates_eval.<device>.quick.json with --quick)")
    args = parser.parse_args(argv)
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    device = torch.device(args.device)
    if args.out is None:
        args.out = RESULTS / f"rates_eval.{device.type}{'.quick' if args.quick else ''}.json"
    ks = (1, 10, GOAL_K) if args.quick else (1, 10, 100, 1000, 10000)
    bs = (1024,) if args.quick else (1024, 65536)
    min_run_time, warmup = (0.05, 2) if args.quick else (1.0, 5)

    figures: dict[str, float] = {}
    units: dict[str, str] = {}
    header = f"{'B':>6} {'K':>6} {'bce ms':>9} {'rates ms':>9} {'true ms':>9} " \
             f"{'rates/K=1':>10} {'true/K=1':>9} {'compile s':>10}"
    print(f"device={device.type} threads={threads}")
    print(header)
    print("-" * len(header))
    for b in bs:
        # A discarded first case: the process's first timings (thread pool, allocator) run slow,
        # which would inflate the K = 1 baseline and flatter every ratio to it.
        bench_case(b, ks[0], device, threads, min_run_time / 2, warmup)
        base: dict[str, float] = {}
        for k in ks:
            r = bench_case(b, k, device, threads, min_run_time, warmup)
            base = base or r
            tag = f"[K={k},B={b}]"
            for col, unit in (("bce", "ms"), ("rates", "ms"), ("true", "ms"),
                              ("compile_s", "s")):
                name = (col if col == "compile_s" else f"{col}_ms") + tag
                figures[name] = r[col]
                units[name] = unit
            for col in ("rates", "true"):
                name = f"{col}_vs_K1{tag}"
                figures[name] = r[col] / base[col]
                units[name] = f"{col} time / {col} time at K=1"
            print(f"{b:>6} {k:>6} {r['bce']:9.3f} {r['rates']:9.3f} {r['true']:9.3f} "
                  f"{r['rates'] / base['rates']:10.2f} {r['true'] / base['true']:9.2f} "
                  f"{r['compile_s']:10.3f}")
    names = [f"{col}_vs_K1[K={GOAL_K},B={b}]" for b in bs for col in ("rates", "true")]
    goals = {name: goal(figures[name], GOAL_RATIO) for name in names}
    print_goals(goals)
    result = {
        "figures": figures, "units": units, "goals": goals,
        "machine": machine(device, threads),
        "config": {"quick": args.quick, "features": FEATURES, "ks": list(ks), "batch_sizes":
                   list(bs), "rates": "TPR of each value of one K-valued group attribute",
                   "surrogate": "hinge", "evaluator_mode": "train (running denominators)",
                   "backward": "sum of upper surrogates", "statistic":
                   "median of torch.utils.benchmark blocked_autorange blocks",
                   "min_run_time_s": min_run_time, "warmup_calls": warmup,
                   "discarded_warmup_case": "K=1 at each batch size"},
    }
    result = write_run(args.out, result, argv)
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
