"""Golden trajectories of every preset: 200 full-batch game steps, recorded before a refactor.

Each case plays one preset on a problem it accepts — P1 (1 − G-mean), P2 (error under TPR parity;
KLD under an error bound), P3 (F1 under F1 parity) — with a linear model and a small MLP, one
torch thread (multi-threaded MKL is not reproducible across processes). Per step it keeps θ (all
parameters, flattened), ω, λ and the slacks played, the true objective and constraints and the
θ-player's surrogate loss; every 10 steps a snapshot's exact whole-split leaf values (the
stochastic model's, as their mean, and the best iterate's inputs) and the best-iterate index.

``python tests/game/golden/record.py`` rewrites ``trajectories.pt.gz``; the test
``tests/game/test_game_golden.py`` replays every case and compares.
"""

from __future__ import annotations

import gzip
import io
import sys
from pathlib import Path

import torch

from fairgames.data import make_synthetic
from fairgames.game import ConstrainedOptimizer, Problem, best_iterate
from fairgames.rates import (
    Batch,
    error_rate,
    fmeasure,
    gmean,
    group,
    kld,
    true_positive_rate,
)

HERE = Path(__file__).resolve().parent
PATH = HERE / "trajectories.pt.gz"
STEPS, EVERY = 200, 10
PROBLEMS = ("P1_gmean", "P2_tpr_parity", "P2_kld_error", "P3_f1_parity")
PRESET_PROBLEMS = {
    "frank_wolfe": ("P1_gmean",),
    "spade": ("P1_gmean",),
    "nemsis": ("P1_gmean",),
    "algorithm1": ("P1_gmean", "P2_tpr_parity", "P2_kld_error"),
    "algorithm2": ("P1_gmean", "P2_tpr_parity", "P2_kld_error"),
    "algorithm3": ("P3_f1_parity",),
    "lagrangian": ("P2_tpr_parity", "P2_kld_error"),
    "proxy_lagrangian": PROBLEMS,
}
MODELS = ("linear", "mlp")
# Strategies no preset plays by default, on one problem each: (case name, preset, problem,
# ConstrainedOptimizer options).
VARIANTS = {
    "algorithm2+eg": ("algorithm2", "P2_tpr_parity", {"multipliers": "exponentiated_gradient"}),
    "algorithm2+psi_ogd": ("algorithm2", "P1_gmean", {"psi_slacks": "gradient"}),
    "algorithm3+num_den": ("algorithm3", "P3_f1_parity",
                           {"ratio_slacks": "num_den", "slack_lr": 0.001}),
    "proxy_lagrangian+z": ("proxy_lagrangian", "P3_f1_parity", {"ratio_slacks": "gradient"}),
}


def data():
    return make_synthetic(n=500, d=5, group_shift=1.5, seed=0).train


def problem(name: str) -> Problem:
    # The recordings were made with the hinge, the default surrogate then; the default is now
    # "auto" (the sigmoid for F-measure parity), so the hinge is named here: these cases test
    # the game's mechanics, not the choice of surrogate.
    a, b = group("group", "0"), group("group", "1")
    hinge = {"surrogate": "hinge"}
    if name == "P1_gmean":
        return Problem(1.0 - gmean(), **hinge)
    if name == "P2_tpr_parity":
        gap = true_positive_rate(b) - true_positive_rate(a)
        return Problem(error_rate(), [(gap >= -0.02).named("tpr_b"),
                                      (gap <= 0.02).named("tpr_a")], **hinge)
    if name == "P2_kld_error":
        return Problem(kld(a) + kld(b), [(error_rate() <= 0.3).named("error")], **hinge)
    if name == "P3_f1_parity":
        return Problem(-fmeasure(), [(fmeasure(b) >= fmeasure(a) - 0.02).named("f1_parity")],
                       **hinge)
    raise KeyError(name)


def model(kind: str, d: int) -> torch.nn.Module:
    if kind == "linear":
        return torch.nn.Linear(d, 1)
    return torch.nn.Sequential(torch.nn.Linear(d, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))


def cases() -> dict[str, tuple[str, str, str, dict]]:
    """``{"preset/problem/model": (preset, problem, model, options)}``."""
    out = {f"{p}/{q}/{m}": (p, q, m, {}) for p in sorted(PRESET_PROBLEMS)
           for q in PRESET_PROBLEMS[p] for m in MODELS}
    for name, (p, q, opts) in VARIANTS.items():
        out.update({f"{name}/{q}/{m}": (p, q, m, opts) for m in MODELS})
    return out


def fields(ds) -> dict:
    return {"labels": ds.labels, "groups": {"group": ds.groups["group"]},
            "group_values": {"group": ds.group_names["group"]}}


def flat(m: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()]).clone()


def play(preset: str, problem_name: str, kind: str, options: dict | None = None,
         steps: int = STEPS) -> dict:
    """One case's trajectory (see the module docstring), on one torch thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _play(preset, problem_name, kind, options or {}, steps)
    finally:
        torch.set_num_threads(threads)


def _play(preset: str, problem_name: str, kind: str, options: dict, steps: int) -> dict:
    ds = data()
    torch.manual_seed(0)
    net = model(kind, ds.features.shape[1])
    prob = problem(problem_name)
    copt = ConstrainedOptimizer(prob, torch.optim.SGD(net.parameters(), lr=0.1), preset=preset,
                                **options)
    f = fields(ds)
    keys = ("objective_weight", "multipliers", "slacks", "objective_true",
            "constraints_true", "objective_surrogate")
    out: dict[str, list] = {k: [] for k in ("theta", *keys)}
    snaps: list[torch.Tensor] = []
    evaluator = prob.make_evaluator()
    for step in range(steps):
        copt.step_batch(net, ds.features, **f)
        rec = copt.last
        out["theta"].append(flat(net))
        for k in keys:
            out[k].append(getattr(rec, k).detach().clone().reshape(-1))
        if (step + 1) % EVERY == 0:
            with torch.no_grad():
                scores = net(ds.features)[:, 0]
            snaps.append(evaluator.evaluate_split([Batch(scores=scores, **f)]).true)
    result = {k: torch.stack(v) for k, v in out.items()}
    leaves = torch.stack(snaps)                      # [R, K] float64
    objectives, rows = [], []
    for r in range(leaves.shape[0]):
        obj, g = copt.terms.truth(leaves[r])
        objectives.append(float(obj))
        rows.append(g.tolist())
    result["snapshot_leaves"] = leaves
    result["best_iterate"] = torch.tensor(best_iterate(objectives, rows))
    result["stochastic_leaves"] = leaves.mean(0)
    return result


def fingerprint() -> str:
    """Where bit-identity is expected: the same torch build on the same CPU kernels."""
    return f"torch {torch.__version__}, cpu {torch.backends.cpu.get_cpu_capability()}"


def record(path: Path = PATH) -> None:
    data_out: dict = {name: play(*case) for name, case in cases().items()}
    data_out["_fingerprint"] = fingerprint()
    buf = io.BytesIO()
    torch.save(data_out, buf)
    with gzip.GzipFile(path, "wb", mtime=0) as fh:
        fh.write(buf.getvalue())
    print(f"wrote {len(data_out)} cases to {path}")


def load(path: Path = PATH) -> dict:
    with gzip.open(path, "rb") as fh:
        return torch.load(io.BytesIO(fh.read()), weights_only=True)


if __name__ == "__main__":
    sys.exit(record())
