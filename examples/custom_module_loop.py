"""Your own ``nn.Module`` in a hand-written torch loop with ``ConstrainedOptimizer``.

The optimizer wraps any torch optimizer and behaves like one: ``zero_grad`` / ``backward`` /
``step``, gradient clipping, your own sampler. Here: minimise the error subject to equal
opportunity (every group's true positive rate within 0.02 of the overall one), written in the
problem language, with snapshots for the stochastic solution and an exact whole-split
evaluation at the end.

    python examples/custom_module_loop.py           # a few hundred steps on synthetic data
    python examples/custom_module_loop.py --quick   # a few steps (smoke test)
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from fairgames.data import MinibatchSampler, make_synthetic
from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.game.solutions import SnapshotRecorder
from fairgames.problems import ProblemSpec
from fairgames.rates import Batch, RateEvaluator


def batch_of(ds, scores, index=None, mixture_weights=None) -> Batch:
    """A batch for the exact evaluation below (a bare evaluator: the value names are given)."""
    sel = slice(None) if index is None else index
    return Batch(scores=scores, labels=ds.labels[sel], groups={"group": ds.groups["group"][sel]},
                 group_values=ds.group_names, mixture_weights=mixture_weights)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--quick", action="store_true", help="40 steps")
    args = parser.parse_args(argv)
    steps = 40 if args.quick else args.steps
    torch.manual_seed(0)
    splits = make_synthetic(n=4000, d=10, group_shift=1.5, seed=0)
    train, test = splits.train, splits.test

    # The problem in the problem language (configs/problem/equal_opportunity.yaml, tighter).
    spec = ProblemSpec(
        "equal_opportunity", objective="error()",
        constraints={"tpr": "for g in groups: tpr(group=g) >= tpr() - tolerance"},
        tolerance=0.02, tolerance_kind="difference")
    built = spec.build("group", train.group_names)      # one constraint per group
    # the groups' value names are declared once, on the problem: batches carry codes only
    problem = Problem(built.objective, built.constraints, group_values=built.group_values)

    model = nn.Sequential(nn.Linear(train.num_features, 32), nn.ReLU(), nn.Linear(32, 1))
    copt = ConstrainedOptimizer(problem, torch.optim.Adam(model.parameters(), lr=0.01))
    sampler = MinibatchSampler(train, batch_size=256, seed=0)
    snapshots = SnapshotRecorder(model, every=5, capacity=50)
    for step in range(1, steps + 1):
        index = next(sampler)
        scores = model(train.features[index]).squeeze(-1)
        copt.zero_grad()
        loss = copt.lagrangian(copt.batch(scores, train.labels[index],
                                          groups={"group": train.groups["group"][index]}))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        copt.step()
        snapshots.step()
        if step % max(1, steps // 4) == 0:       # reading values syncs: do it at intervals
            copt.check()     # a step with a NaN/inf score or gradient was skipped: raise
            rec = copt.last
            worst = float(rec.constraints_true.max())
            print(f"step {step}: error {float(rec.objective_true):.4f}, worst constraint "
                  f"{worst:+.4f}, λ {copt.multipliers_by_name()}")

    # Exact whole-split evaluation: the final model and the stochastic model (the mixture).
    evaluator = RateEvaluator([built.objective, *built.constraints])
    out = {}
    with torch.no_grad():
        final = evaluator.evaluate_split([batch_of(test, model(test.features).squeeze(-1))])
        mixture = snapshots.to_stochastic_model()
        mixed = evaluator.evaluate_split([mixture.batch(
            test.features, test.labels, groups={"group": test.groups["group"]},
            group_values=test.group_names)])
    for name, values in (("final", final), ("stochastic", mixed)):
        obj = float(built.objective.evaluate(values))
        worst = max(float(c.value(values)) for c in built.constraints)
        out[name] = {"objective": obj, "worst_constraint": worst}
        print(f"{name:>10} on test: error {obj:.4f}, worst constraint value {worst:+.4f}")
    return out


if __name__ == "__main__":
    main()
