"""Your own ``nn.Module`` through the fairgames engine.

Any module that maps features ``[B, D]`` to scores ``[B]`` (predicted positive iff > 0) can be
trained on a catalog problem with :func:`fairgames.train.fit`, which gives you what
``scripts/train.py`` gives: TensorBoard logging, snapshots, the recommended solution (the one
to deploy, ``result.recommended``), the final model, the best iterate and the stochastic
model, results.json / report.md / dynamics.png.

    python examples/custom_module_engine.py                  # synthetic data
    python examples/custom_module_engine.py --data adult     # real data (needs the data package)
    python examples/custom_module_engine.py --quick          # a few steps (smoke test)
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from torch import nn

from fairgames.data import load, make_synthetic
from fairgames.train import fit


class GatedScorer(nn.Module):
    """A user's model: a linear score plus a gated non-linear correction."""

    def __init__(self, d: int, width: int = 32) -> None:
        super().__init__()
        self.linear = nn.Linear(d, 1)
        self.hidden = nn.Sequential(nn.Linear(d, width), nn.Tanh(), nn.Linear(width, 1))
        self.gate = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.linear(x) + torch.sigmoid(self.gate) * self.hidden(x)).squeeze(-1)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="synthetic", help="synthetic, adult, compas, ...")
    parser.add_argument("--problem", default="equal_opportunity",
                        help="a configs/problem name")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--quick", action="store_true", help="30 steps")
    parser.add_argument("--out", default=None, help="run directory (default: a temp dir)")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    if args.data == "synthetic":
        splits, protected = make_synthetic(n=4000, d=10, group_shift=1.5, seed=0), "group"
    else:
        protected = "sex"
        splits = load(args.data, protected=protected)
    model = GatedScorer(splits.train.num_features)
    out = args.out or tempfile.mkdtemp(prefix="fairgames-example-")
    result = fit(
        model, args.problem, splits, protected=protected,
        optimizer=torch.optim.Adam(model.parameters(), lr=0.01),
        algorithm="proxy_lagrangian",
        trainer={"steps": 30 if args.quick else args.steps, "batch_size": 512,
                 "log_every": 10 if args.quick else 50},
        run_dir=out)
    for name in ("recommended", "final", "best_iterate", "stochastic"):
        m = result.results["solutions"][name]["test"]
        cons = ", ".join(f"{k} {v['value']:+.3f}" for k, v in m["constraints"].items())
        print(f"{name:>12}: objective {m['objective']:.4f}  error {m['error']:.4f}  {cons}")
    print(f"recommended: {result.results['training']['recommended']['reason']}")
    print(f"outputs in {out} (tensorboard --logdir {out})")
    return result.results


if __name__ == "__main__":
    main()
