"""Reading many metrics at once (``ExactEvaluator.read``, :class:`VectorRead`) gives each
metric's value bit for bit as :meth:`Expression.evaluate` reads it alone: NaN and ±inf
where a subset or a denominator is empty, ψ metrics and constants included."""

from __future__ import annotations

import struct

import torch

from fairgames.rates import (
    Batch,
    ExactEvaluator,
    GroupTable,
    error_rate,
    fmeasure,
    group,
    precision,
    true_positive_rate,
)
from fairgames.rates.exact_read import VectorRead, vectorizable
from fairgames.rates.expressions import Expression


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


def split(n: int = 400, groups: int = 30, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, groups - 2, (n,), generator=g)     # the last 2 groups empty
    labels = (torch.rand(n, generator=g) < 0.4).double()
    scores = torch.randn(n, generator=g) - 1.5 * (codes % 5 == 0)   # some groups: no positive
    return Batch(scores=scores, labels=labels, groups={"g": codes},
                 group_values={"g": [str(i) for i in range(groups)]})


def metrics() -> dict:
    table = GroupTable("g", [str(i) for i in range(30)], "binary")
    out = dict(table.metrics)
    tpr = true_positive_rate()
    for i in range(30):
        a = group("g", str(i))
        out[("eo", i)] = (true_positive_rate(a) >= tpr - 0.05).named(f"eo{i}")
        out[("mixed", i)] = (0.3 - 2.0 * error_rate(a) + precision(a) - 0.5 * fmeasure(a)
                             + 1.0 / (true_positive_rate(a) + 1e-3 * i))
        out[("const_over", i)] = 2.0 / true_positive_rate(a)
    out["constant"] = Expression.constant(0.1)
    return out


def test_read_equals_each_metric_evaluated_alone_bit_for_bit():
    ms = metrics()
    ev = ExactEvaluator(ms, optional=ms)
    values = ev.leaf_values(split())
    read = ev.read(values)
    alone = ev._read_each(values, list(ms)).tolist()
    assert list(read) == list(ms)
    assert [bits(v) for v in read.values()] == [bits(v) for v in alone]
    nonfinite = [v for v in alone if v != v or abs(v) == float("inf")]
    assert len(nonfinite) > 30           # empty groups and 0/0 ratios are in the comparison
    # a chosen subset reads the same values, and a second read reuses the plan
    names = list(ms)[5::7]
    again = ev.read(values, names)
    assert list(again) == names
    assert [bits(again[n]) for n in names] == [bits(read[n]) for n in names]


def test_vector_read_equals_expression_evaluate():
    exprs = [e.expression if hasattr(e, "expression") else e for e in metrics().values()
             if not hasattr(e, "key")]
    exprs = [e for e in exprs if vectorizable(e)]
    ev = ExactEvaluator(dict(enumerate(exprs)), optional=range(len(exprs)))
    values = ev.leaf_values(split(seed=1))
    got = VectorRead(exprs, values.index)(values).tolist()
    assert [bits(v) for v in got] == [bits(float(e.evaluate(values))) for e in exprs]


def test_psi_metrics_and_constants_are_not_vectorized():
    table = GroupTable("g", ["0"], "binary")
    kld = table.metrics[("g=0", "kld")]
    assert not vectorizable(kld) and not vectorizable(Expression.constant(1.0))
    assert vectorizable(table.metrics[("g=0", "precision")])
