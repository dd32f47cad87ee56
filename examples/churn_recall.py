"""Paper 001's churn scenario in your own torch loop: replace a deployed model without losing
its recall or changing too many of its decisions (``problem=churn_recall`` from Python).

On Adult cut into three sources (``configs/data/adult_churn.yaml``): minimise the errors on
D1 plus the false positives on D2, subject to recall on D2 at least the deployed model's and
churn (the share of predictions that differ from the deployed model's) on the unlabeled D3 at
most a target. The deployed model is a linear model trained first on a quarter of the labeled
training rows (an earlier model that saw less data).

    python examples/churn_recall.py                # 400 steps, churn target 0.05
    python examples/churn_recall.py --quick        # a few steps (smoke test)
    python examples/churn_recall.py --target 0.02
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import yaml
from torch import nn

from fairgames.data import labeled_part
from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.problems import ProblemSpec
from fairgames.rates import Batch, RateEvaluator
from fairgames.train.data import load_splits
from fairgames.train.helpers import baseline_values

DATA = Path(__file__).resolve().parents[1] / "configs" / "data" / "adult_churn.yaml"


def train_deployed(train, steps: int) -> nn.Module:
    """The deployed model: logistic regression on a seeded quarter of the labeled rows."""
    labeled = labeled_part(train)
    rows = torch.randperm(len(labeled), generator=torch.Generator().manual_seed(7))
    rows = rows[: len(labeled) // 4]
    x, y = labeled.features[rows], labeled.labels[rows]
    model = nn.Linear(train.num_features, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.binary_cross_entropy_with_logits(model(x).squeeze(-1), y).backward()
        opt.step()
    return model.eval()


def batch_of(ds, scores, baseline) -> Batch:
    """Every source's rows with their ids, the deployed model's scores (churn) and the
    unlabeled source named (its labels are never read)."""
    return Batch(scores=scores, labels=ds.labels, baseline_scores=baseline,
                 sources=ds.sources, source_names=ds.source_names,
                 unlabeled_sources=ds.unlabeled)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--target", type=float, default=0.05, help="churn target on D3")
    parser.add_argument("--quick", action="store_true", help="30 steps")
    args = parser.parse_args(argv)
    steps = 30 if args.quick else args.steps
    torch.manual_seed(0)
    splits = load_splits(yaml.safe_load(DATA.read_text()), seed=0)
    train = splits.train

    deployed = train_deployed(train, steps)
    with torch.no_grad():
        base = {p: deployed(getattr(splits, p).features).squeeze(-1) for p in ("train", "test")}
    # the recall floor: the deployed model's recall on D2's training rows
    values = baseline_values({"baseline_tpr_d2": 'tpr(source="d2")'}, train, "sex",
                             base["train"])
    spec = ProblemSpec("churn_recall", 'error(source="d1") + fp(source="d2")',
                       {"recall": 'tpr(source="d2") >= baseline_tpr_d2',
                        "churn": 'churn(source="d3") <= tolerance'},
                       tolerance=args.target, tolerance_kind="bound")
    built = spec.build(None, {}, values, sources=train.source_names, unlabeled=train.unlabeled)
    problem = Problem(built.objective, built.constraints)

    model = nn.Linear(train.num_features, 1)
    copt = ConstrainedOptimizer(problem, torch.optim.Adam(model.parameters(), lr=0.05))
    for step in range(1, steps + 1):      # full batch: every source's training rows
        copt.zero_grad()
        copt.lagrangian(batch_of(train, model(train.features).squeeze(-1),
                                 base["train"])).backward()
        copt.step()
        if step % max(1, steps // 4) == 0:      # reading values syncs: at intervals
            copt.check()
            rec = copt.last
            print(f"step {step}: objective {float(rec.objective_true):.4f}, constraints "
                  f"{[round(float(v), 4) for v in rec.constraints_true]}")

    evaluator = RateEvaluator([built.objective, *built.constraints])
    out = {"baseline_tpr_d2": values["baseline_tpr_d2"]}
    with torch.no_grad():
        for part in ("train", "test"):
            ds = getattr(splits, part)
            v = evaluator.evaluate_split([batch_of(ds, model(ds.features).squeeze(-1),
                                                   base[part])])
            out[part] = {"objective": float(built.objective.evaluate(v)),
                         **{str(c.name): float(c.value(v)) for c in built.constraints}}
            print(f"{part:>5}: objective {out[part]['objective']:.4f}, recall constraint "
                  f"{out[part]['recall']:+.4f}, churn constraint {out[part]['churn']:+.4f} "
                  "(≤ 0 met)")
    return out


if __name__ == "__main__":
    main()
