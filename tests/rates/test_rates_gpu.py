"""On a CUDA device: the fused pass equals the CPU pass, whole splits are exact, and a training
step through the rates layer makes no host-device sync (CUDA's sync debug mode "error" plus the
dispatch-mode guard)."""

from __future__ import annotations

import pytest
import torch

import fairgames.rates as R
from fairgames.rates import Batch, RateEvaluator, group, no_host_sync

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

K, N = 300, 4096


def items():
    tprs = [R.true_positive_rate(group("g", f"v{i}")) for i in range(K)]
    return tprs + [R.fmeasure(group("s", "u")) >= R.fmeasure() - 0.02, R.churn_rate() <= 0.2,
                   R.group_loss("logistic", group("s", "v")), R.gmean(),
                   *R.score_rates([0.0, 0.5], group("g", "v1"))]


def fields(device: str, seed: int = 0) -> dict:
    gen = torch.Generator().manual_seed(seed)
    labels = (torch.rand(N, generator=gen) < 0.4).float()
    codes = torch.randint(0, K, (N,), generator=gen)
    codes[: 2 * K] = torch.arange(2 * K) % K     # every group has a positive and a negative
    labels[:K], labels[K: 2 * K] = 1.0, 0.0
    out = {"labels": labels, "weights": torch.rand(N, generator=gen) + 0.5,
           "groups": {"g": codes, "s": torch.rand(N, 2, generator=gen) / 2},
           "baseline_scores": torch.randn(N, generator=gen)}
    out = {k: ({a: t.to(device) for a, t in v.items()} if isinstance(v, dict) else v.to(device))
           for k, v in out.items()}
    out["group_values"] = {"g": [f"v{i}" for i in range(K)], "s": ["u", "v"]}
    return out


def test_cuda_pass_equals_cpu_pass_and_split_is_exact():
    scores = torch.randn(N, generator=torch.Generator().manual_seed(1))
    cpu_ev, gpu_ev = RateEvaluator(items(), "logistic"), RateEvaluator(items(), "logistic").cuda()
    cpu = cpu_ev(Batch(scores=scores, **fields("cpu")))
    gpu = gpu_ev(Batch(scores=scores.cuda(), **fields("cuda")))
    torch.testing.assert_close(gpu.true.cpu(), cpu.true, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gpu.upper.cpu(), cpu.upper, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gpu.lower.cpu(), cpu.lower, rtol=1e-5, atol=1e-6)
    chunks = lambda dev: [Batch(scores=scores[i::3].to(dev), **_take(fields(dev), i))  # noqa: E731
                          for i in range(3)]
    split_cpu = cpu_ev.evaluate_split(chunks("cpu"))
    split_gpu = gpu_ev.evaluate_split(chunks("cuda"))
    torch.testing.assert_close(split_gpu.true.cpu(), split_cpu.true, rtol=1e-12, atol=1e-14)


def _take(f: dict, i: int) -> dict:
    sel = lambda t: t[i::3]  # noqa: E731
    return {"labels": sel(f["labels"]), "weights": sel(f["weights"]),
            "groups": {k: sel(v) for k, v in f["groups"].items()},
            "baseline_scores": sel(f["baseline_scores"]), "group_values": f["group_values"]}


def test_cuda_training_step_makes_no_host_sync():
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1).cuda()
    x = torch.randn(N, 16, device="cuda")
    f = fields("cuda")
    ev = RateEvaluator(items()).cuda().train()
    lam = torch.rand(len(ev.leaves), device="cuda")

    def step() -> R.LeafValues:
        model.zero_grad()
        s = model(x)[:, 0]
        values = ev(Batch(scores=s, **f))
        loss = torch.nn.functional.binary_cross_entropy_with_logits(s, f["labels"])
        (loss + (lam * values.upper).sum() - values.lower.mean()).backward()
        return values

    step()                               # compiles the plan (syncs once, by design)
    torch.cuda.synchronize()
    with no_host_sync():
        for _ in range(5):
            values = step()
    torch.cuda.synchronize()
    assert bool(torch.isfinite(values.upper).all())
    ev.check_finite()
