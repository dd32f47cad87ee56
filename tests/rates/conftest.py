"""Random data for the rates tests, and its expansion into rows for the numpy references.

The references never use the evaluator's partition: every example is expanded into weighted
*rows*, one per (soft group value, mixture member or prediction outcome) combination, each with
hard 0/1 predictions. A soft membership ``m`` of value ``g`` becomes a row of weight ``w·m`` whose
soft value is ``g`` (the remainder ``1 − Σ m`` becomes a row of value "none"), so a subset's
weight is its membership and a complement's is ``1 − membership``. A mixture member ``r`` becomes
a row of weight ``w·q_r`` predicting with ``s_r``; a probability ``p`` becomes a positive row of
weight ``w·p`` and a negative one of weight ``w·(1 − p)``. Any weighted statistic of the rows (a
scikit-learn metric with ``sample_weight``) is then the expected statistic that the evaluator
must return: rates averaged over members first, then ratios / ψ of the averages.

Test modules get these helpers through the session fixture ``rates_data`` (pytest imports test
modules in importlib mode, so a module cannot import a sibling helper module).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fairgames.rates import Batch

HARD = ["a", "b", "c", "d"]      # hard attribute "h"; "d" never occurs when empty=True
SOFT = ["u", "v", "w"]           # soft attribute "s"; "w" has zero membership when empty=True
SOURCES = ["s0", "s1"]
NONE = len(SOFT)                 # the soft "no value" row


def f32(x: np.ndarray) -> np.ndarray:
    """Values exactly representable in float32 (so float32 and float64 compare alike)."""
    return np.asarray(x, dtype=np.float32).astype(np.float64)


@dataclass
class Rows:
    """The expanded rows (see the module docstring); all arrays have one entry per row."""

    w: np.ndarray        # row weight (example weight × membership × member weight)
    y: np.ndarray        # label (int 0/1, or real in [0, 1])
    yhat: np.ndarray     # hard prediction of this row (int 0/1)
    s: np.ndarray        # score of this row (nan for probability input)
    b0: np.ndarray       # baseline prediction (bool)
    hard: np.ndarray     # hard group code
    soft: np.ndarray     # soft group value (NONE for the remainder)
    src: np.ndarray      # source id


@dataclass
class Data:
    """Random inputs of one batch (numpy, float32-exact) in one of three prediction modes."""

    mode: str                    # "scores", "mixture" or "probabilities"
    y: np.ndarray
    w: np.ndarray | None
    scores: np.ndarray | None    # [B] or [R, B]
    q: np.ndarray | None         # mixture weights [R]
    p: np.ndarray | None         # probabilities [B]
    base: np.ndarray
    hard: np.ndarray
    soft: np.ndarray             # [B, 3] memberships, rows sum <= 1
    src: np.ndarray
    label_kind: str = "binary"

    @property
    def n(self) -> int:
        return len(self.y)

    def batch(self, dtype: torch.dtype = torch.float32, **overrides) -> Batch:
        t = lambda a: torch.tensor(a, dtype=dtype)  # noqa: E731
        kw: dict = {
            "labels": t(self.y), "label_kind": self.label_kind,
            "weights": None if self.w is None else t(self.w),
            "groups": {"h": torch.tensor(self.hard, dtype=torch.long), "s": t(self.soft)},
            "group_values": {"h": HARD, "s": SOFT},
            "baseline_scores": t(self.base),
            "sources": torch.tensor(self.src, dtype=torch.long), "source_names": SOURCES,
        }
        if self.mode == "probabilities":
            kw["probabilities"], kw["scores"] = t(self.p), None
        else:
            kw["scores"] = t(self.scores)
            if self.mode == "mixture":
                kw["mixture_weights"] = t(self.q)
        kw.update(overrides)
        return Batch(**kw)

    def rows(self) -> Rows:
        n = self.n
        w = np.ones(n) if self.w is None else self.w
        memb = np.concatenate([self.soft, 1.0 - self.soft.sum(1, keepdims=True)], axis=1)
        if self.mode == "scores":
            pred = [(1.0, self.scores)]
        elif self.mode == "mixture":
            pred = list(zip(self.q, self.scores, strict=True))
        else:  # a probability is a mixture of "always positive" and "always negative"
            pred = [(self.p, np.full(n, np.inf)), (1.0 - self.p, np.full(n, -np.inf))]
        cols: dict[str, list] = {k: [] for k in Rows.__dataclass_fields__}
        for g in range(NONE + 1):
            for weight, s in pred:
                cols["w"].append(w * memb[:, g] * weight)
                cols["y"].append(self.y)
                cols["yhat"].append((s > 0).astype(int))
                cols["s"].append(np.where(np.isfinite(s), s, np.nan))
                cols["b0"].append(self.base > 0)
                cols["hard"].append(self.hard)
                cols["soft"].append(np.full(n, g))
                cols["src"].append(self.src)
        return Rows(**{k: np.concatenate(v) for k, v in cols.items()})


def make_data(seed: int, n: int, *, mode: str = "scores", weighted: bool = True,
              empty: bool = True, members: int = 3, label_kind: str = "binary") -> Data:
    """Random batch data. Scores are partly on a 0.25 grid so that ties with the decision
    threshold 0 and the score_rates thresholds occur (strict ``s > 0`` vs ``s >= z``)."""
    rng = np.random.default_rng(seed)

    def scores(shape) -> np.ndarray:
        grid = np.round(rng.normal(0.0, 1.5, shape) * 4) / 4
        jitter = (rng.random(shape) < 0.5) * rng.normal(0.0, 0.1, shape)
        return f32(grid + jitter)

    if label_kind == "binary":
        y = rng.integers(0, 2, n).astype(np.float64)
    else:
        y = f32(rng.random(n))
    w = f32(rng.uniform(0.1, 2.0, n)) if weighted else None
    hard = rng.integers(0, 3 if empty else 4, n)
    # Memberships on a 1/8 grid: exact in float32, so a subset is empty in float32 exactly when
    # it is empty in float64 (no 1e-8 remainders below the evaluator's floor).
    counts = rng.multinomial(8, [0.3, 0.3, 0.2, 0.2], size=n).astype(np.float64)
    if empty:
        counts[:, 3] += counts[:, 2]
        counts[:, 2] = 0.0
    soft = counts[:, :3] / 8.0
    s = q = p = None
    if mode == "scores":
        s = scores(n)
    elif mode == "mixture":
        s = scores((members, n))
        q = rng.multinomial(8, np.full(members, 1.0 / members)) / 8.0
    elif mode == "probabilities":
        p = f32(rng.random(n))
        p[rng.random(n) < 0.2] = 0.0
        p[rng.random(n) < 0.2] = 1.0
    else:
        raise ValueError(mode)
    return Data(mode, y, w, s, q, p, scores(n), hard, soft, rng.integers(0, 2, n), label_kind)


@pytest.fixture(scope="session")
def rates_data() -> SimpleNamespace:
    """``make(seed, n, **options) -> Data`` and the constants of the random data."""
    return SimpleNamespace(make=make_data, HARD=HARD, SOFT=SOFT, SOURCES=SOURCES, NONE=NONE,
                           f32=f32)
