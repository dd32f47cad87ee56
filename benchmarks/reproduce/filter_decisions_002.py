"""The measured effect of the decisions paper 002 leaves open in the (α, β)-tree
(docs/filtering.md): each variant fitted on Adult (z = race, K = 5, paper 002's recipe) at
one α, against the library's choice, train and test imbalance, leaves, acceptance and time.

Variants (each changes one decision; the library's own code is patched for the run only):

* ``default``: T = 100, α·Σw·h, corrected Q without f(γ), every leaf tried, best kept;
* ``T=400``: 4×T (is T = 100 converged? the issue's check: within the seed CI of 4×T);
* ``bare_alpha``: Program (3)'s printed constraint, a bare α against the normalised mass;
* ``lemma3_corrected`` / ``lemma3_printed``: Lemma 4's objective WITH its f(γ) term, Q with the
  corrected sign and with the printed one;
* ``largest_leaf``: only the leaf of the largest mass is tried each round.

Child labelling has no variant: both children are kept as leaves, so swapping the names
``V0`` / ``V1`` renames leaves and changes no number.

    python -m benchmarks.reproduce.filter_decisions_002 --seeds 2 --alpha 0.6

Example:
    >>> VARIANTS[0], len(VARIANTS)
    ('default', 6)
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.results import command, write

RESULTS = Path(__file__).resolve().parents[1] / "results"
VARIANTS = ("default", "T=400", "bare_alpha", "lemma3_corrected", "lemma3_printed",
            "largest_leaf")


@contextlib.contextmanager
def variant(name: str) -> Iterator[dict[str, Any]]:
    """The tree options of ``name``, with the library patched for its duration."""
    from fairgames.filtering import abtree, alpha_beta

    saved = (alpha_beta.constraint_values, abtree.lemma4_costs, abtree._Grow.candidate)
    options: dict[str, Any] = {"T": 400 if name == "T=400" else 100}
    if name == "bare_alpha":
        def bare(h, wn, G, alpha):  # s1 = s0 = 1: α against the normalised mass
            m1, m0 = (wn * h) @ G, (wn * (1 - h)) @ G
            return np.stack([m1 - alpha, -m1 - alpha, m0 - alpha, -m0 - alpha])
        alpha_beta.constraint_values = bare
    if name.startswith("lemma3"):
        options["lemma3"] = True
    if name == "lemma3_printed":
        def printed(onehot, w, target, closest, gamma):  # Q = c̄ + ‖U − U′‖ f(γ)
            c = onehot @ (closest - target)
            row = w @ onehot / w.sum()
            q = float(w @ c / w.sum()) + float(np.linalg.norm(target - closest)) * \
                alpha_beta.lemma3_f(gamma, float(np.linalg.norm(row - closest)))
            return c - q
        abtree.lemma4_costs = printed
    if name == "largest_leaf":
        def largest(self, W, i, closest, d_old):
            if i != int(W.sum(0).argmax()):
                return None
            return saved[2](self, W, i, closest, d_old)
        abtree._Grow.candidate = largest
    try:
        yield options
    finally:
        alpha_beta.constraint_values, abtree.lemma4_costs, abtree._Grow.candidate = saved


def measure(name: str, alpha: float, seed: int, train: Any, test: Any) -> dict[str, Any]:
    from fairgames.filtering import BalancedFilter

    with variant(name) as options:
        t = time.perf_counter()
        f = BalancedFilter("alpha_beta", alpha=alpha, tree_options=options).fit(
            train.X, train.z)
        seconds = time.perf_counter() - t
    out = {"variant": name, "seed": seed, "alpha": alpha, "seconds": seconds,
           "leaves": f.proxy_.n_cells, "distances": list(f.proxy_.distances)}
    for split, d in (("train", train), ("test", test)):
        r = f.report(d.X, d.z)
        out[split] = {k: r[k] for k in ("imbalance_expected", "acceptance_expected",
                                        "disclosivity")}
    return out


def figure(records: Sequence[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    x = np.arange(len(VARIANTS))
    for k, (ax, what) in enumerate(zip(axes, ("imbalance_expected", "leaves", "seconds"),
                                       strict=True)):
        for j, split in enumerate(("train", "test") if k == 0 else ("",)):
            vals = [[r[split][what] if split else r[what] for r in records
                     if r["variant"] == v] for v in VARIANTS]
            ax.bar(x + (j - 0.5) * 0.4 * (k == 0), [np.mean(v) if v else np.nan for v in vals],
                   0.4 if k == 0 else 0.6, label=split or None,
                   yerr=[np.std(v) if len(v) > 1 else 0 for v in vals])
        ax.set_xticks(x, VARIANTS, rotation=30, ha="right")
        ax.set_title(what)
        if k == 0:
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def markdown(result: dict[str, Any]) -> str:
    out = ["# filter_decisions_002 — the (α, β)-tree's open decisions, measured on Adult", "",
           "```console", f"$ {result['command']}", "```", "",
           f"α = {result['alpha']}, seeds {result['seeds']}.", "",
           "![decisions](filter_decisions_002.png)", "",
           "| variant | seed | leaves | train imbalance | test imbalance | train acceptance | "
           "disclosivity | seconds |", "|---|---|---|---|---|---|---|---|"]
    for r in result["records"]:
        out.append(f"| {r['variant']} | {r['seed']} | {r['leaves']} | "
                   f"{r['train']['imbalance_expected']:.4f} | "
                   f"{r['test']['imbalance_expected']:.4f} | "
                   f"{r['train']['acceptance_expected']:.4f} | "
                   f"{r['train']['disclosivity']:.3f} | {r['seconds']:.1f} |")
    return "\n".join(out) + "\n"


def summary_of(result: dict[str, Any], path: Path) -> str:
    """The report of the committed JSON (``path``: unused)."""
    return markdown(result)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from fairgames.filtering.data import load_filter_data

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--variants", help="comma-separated (all)")
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args(argv)
    names = a.variants.split(",") if a.variants else VARIANTS
    records = []
    for seed in range(a.seeds):
        train, test = load_filter_data("adult", paper="002", seed=seed)
        for name in names:
            records.append(measure(name, a.alpha, seed, train, test))
            print(name, seed, records[-1]["leaves"], records[-1]["train"],
                  f"{records[-1]['seconds']:.1f} s", flush=True)
    result = {"command": command(None if argv is None else list(argv)), "alpha": a.alpha,
              "seeds": list(range(a.seeds)), "records": records}
    figure(records, a.out / "filter_decisions_002.png")
    write(a.out / "filter_decisions_002.json", result, markdown=markdown(result), indent=1,
          newline=True)
    return result


if __name__ == "__main__":
    main()
