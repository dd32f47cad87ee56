"""Why the paper-003 reduction's duality gap closes slowly with a heuristic best response
(issue 22): Algorithm 1 on the quick reproduction's Adult-2k cell (``reproduce_003``'s data,
loss, B, η, N; seed 4), with the gap's two sides logged at every check.

Per check it records ``ν̄`` (closed form), ``ν̲`` as Algorithm 1 reads it (the oracle's
response at λ̂: ``nu_under_oracle``) and as the best of that response and every earlier
iterate by the true Lagrangian (``nu_under_found``, ``lower="found"``), the other heuristic's
(LS ↔ LR) Lagrangian at λ̂ against the oracle's, and over the iterations since the last check
how far the oracle's response at λ_t lies above the best earlier iterate at λ_t (a lower
bound on its suboptimality as a best response). The gap sides' tails are fitted as
``a/t + f``. There is no goal: the table is the diagnosis (``docs/fair_regression.md``).

Usage::

    python -m benchmarks.reproduce.reduction_gap  # → results/reduction_gap.json
    python -m benchmarks.reproduce.reduction_gap --oracle ls --out results/reduction_gap_ls.json
    python -m benchmarks.reproduce.reduction_gap --quick  # 300 iterations, writes nothing
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.harness.machine import machine
from benchmarks.harness.results import write_run
from benchmarks.reproduce import reproduce_003 as r003  # the quick cell's data and settings
from fairgames.fair_regression import LeastSquaresOracle, ParityGame, RiskOracle, best_lambda
from fairgames.fair_regression.discretize import lagrangian_costs
from fairgames.fair_regression.expgrad import _Mixture
from fairgames.fair_regression.fitting import Fitter
from fairgames.fair_regression.sample import Sample
from fairgames.game.players.multipliers import ExponentiatedGradient
from fairgames.rates.losses import as_loss

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _game(eps: float, seed: int, oracle: str) -> tuple[ParityGame, Any, Sample]:
    """The cell's game with ``oracle`` playing, and the other heuristic beside it."""
    x, y, codes = r003.data("adult2k", seed)["train"]
    loss = as_loss(r003.REDUCTION_LOSS["logistic"])
    sample = Sample.of(x, y, codes)
    steps = r003.REDUCTION["inner_steps"]
    fitters = [Fitter(lambda: torch.nn.Linear(x.shape[1], 1).double(), x, steps=steps)
               for _ in range(2)]
    lr, ls = RiskOracle(fitters[0], loss), LeastSquaresOracle(fitters[1])
    playing, other = (lr, ls) if oracle == "lr" else (ls, lr)
    return ParityGame(sample, loss, eps, playing, 40), other, sample


def _value(game: ParityGame, model: torch.nn.Module, lam: torch.Tensor) -> float:
    obj, g = game.evaluate(model)
    return float(obj + lam @ g)


def run(eps: float, iterations: int, every: int, oracle: str, eta: float, seed: int
        ) -> list[dict[str, float]]:
    """Algorithm 1 as ``expgrad.play`` plays it (same λ-player, start and steps), logged."""
    torch.manual_seed(seed)
    game, other, sample = _game(eps, seed, oracle)
    bound, m = r003.REDUCTION["bound"], game.num_multipliers
    player = ExponentiatedGradient(m, lr=eta, radius=bound, initial=bound / (m + 1),
                                   dtype=torch.float64)
    mix, lam_sum, excess, rows = _Mixture(), torch.zeros(m, dtype=torch.float64), [], []
    start = time.perf_counter()
    for t in range(1, iterations + 1):
        lam = player.weights()[1].clone()
        h = game.best_response(lam)
        obj_t, g_t = game.evaluate(h)
        if mix.modules:
            excess.append(float(obj_t + lam @ g_t - mix.best_value(lam)))
        mix.add(h, obj_t, g_t)
        lam_sum += lam
        if t % every == 0 or t == iterations:
            rows.append(_check(game, other, sample, mix, lam_sum / t, t, excess[-every:]))
            rows[-1]["seconds"] = time.perf_counter() - start
        player.update(g_t.to(torch.float64))
    return rows


def _check(game: ParityGame, other: Any, sample: Sample, mix: _Mixture,
           lam_hat: torch.Tensor, t: int, excess: list[float]) -> dict[str, float]:
    obj_q, g_q = mix.objective / t, mix.g / t
    lagrangian = float(obj_q + lam_hat @ g_q)
    response = _value(game, game.best_response(lam_hat), lam_hat)
    found = min(response, float(mix.best_value(lam_hat)))
    c_lam = lagrangian_costs(game.c, sample.codes, game.signed(lam_hat), sample.proportions)
    return {"t": t, "nu_over": float(obj_q + best_lambda(g_q, 10.0) @ g_q) - lagrangian,
            "nu_under_oracle": lagrangian - response, "nu_under_found": lagrangian - found,
            "other_minus_oracle": _value(game, other(c_lam), lam_hat) - response,
            "excess_mean": float(np.mean(excess)) if excess else float("nan"),
            "excess_positive": float(np.mean([e > 1e-12 for e in excess])) if excess
            else float("nan"),
            "lambda_hat_total": float(lam_hat.sum()), "members": len(mix.modules)}


def tail_fit(rows: list[dict[str, float]], key: str, start: int) -> dict[str, float]:
    """Least-squares ``a/t + f`` over the checks at ``t ≥ start``, and where it meets ν.

    Example:
        >>> rows = [{"t": t, "g": 4.0 / t + 0.001} for t in (1000, 2000, 4000)]
        >>> {k: round(v, 6) for k, v in tail_fit(rows, "g", 1000).items()}
        {'a': 4.0, 'f': 0.001, 'max_residual': 0.0, 't_at_nu': 4000.0}
    """
    t = np.array([r["t"] for r in rows if r["t"] >= start], dtype=float)
    v = np.array([r[key] for r in rows if r["t"] >= start])
    design = np.c_[1 / t, np.ones_like(t)]
    (a, f), *_ = np.linalg.lstsq(design, v, rcond=None)
    nu = r003.REDUCTION["gap"]
    return {"a": float(a), "f": float(f),
            "max_residual": float(np.abs(design @ [a, f] - v).max()),
            "t_at_nu": float(a / (nu - f)) if f < nu else float("inf")}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--eps", type=float, default=0.02)
    p.add_argument("--iterations", type=int, default=4000)
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--oracle", choices=("lr", "ls"), default="lr")
    p.add_argument("--eta", type=float, default=r003.STEP_SIZE["adult2k"])
    p.add_argument("--seed", type=int, default=4)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    iterations = 300 if args.quick else args.iterations
    every = min(args.every, iterations)
    rows = run(args.eps, iterations, every, args.oracle, args.eta, args.seed)
    start = max(rows[0]["t"], iterations // 4)
    fits = {k: tail_fit(rows, k, start) for k in ("nu_over", "nu_under_oracle",
                                                  "nu_under_found")}
    keys = ["t", "nu_over", "nu_under_oracle", "nu_under_found", "other_minus_oracle",
            "excess_mean", "excess_positive", "lambda_hat_total"]
    print("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for r in rows[:: max(len(rows) // 20, 1)] + rows[-1:]:
        print("| " + " | ".join(f"{r[k]:.5g}" for k in keys) + " |")
    for k, f in fits.items():
        print(f"{k}: a/t + f with a = {f['a']:.3g}, f = {f['f']:.3g} (t ≥ {start}); "
              f"meets ν = {r003.REDUCTION['gap']} at t ≈ {f['t_at_nu']:.3g}")
    out = {"cell": {"data": "adult2k", "seed": args.seed, "eps": args.eps,
                    "oracle": args.oracle, "eta": args.eta, **r003.REDUCTION},
           "iterations": iterations, "machine": machine(torch.device("cpu"), 1),
           "rows": rows, "fits": fits}
    path = args.out or (None if args.quick else RESULTS / "reduction_gap.json")
    if path is not None:
        write_run(path, out, argv, indent=1)
    return out


if __name__ == "__main__":
    main()
