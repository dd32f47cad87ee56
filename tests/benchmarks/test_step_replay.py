"""benchmarks/speed/step_replay.py: every column records and replays (a smoke run), and the
recorded graphs' op counts order the columns as their work does."""

from __future__ import annotations

from pathlib import Path

from benchmarks.speed import step_replay

ROOT = Path(__file__).resolve().parents[2]


def test_columns_record_replay_and_count_their_ops():
    rep = step_replay
    out = rep.run(blocks=2, steps=2)
    cols = out["columns"]
    assert {"plain", "game", "lagrangian", "floor"} <= set(cols)
    for c in cols.values():
        assert c["graph_ops"] > 0
        assert all(len(c[k]) == 3 and c[k][0] <= c[k][1] <= c[k][2]
                   for k in ("eager", "replay", "python"))
    # the game does the plain step's work and the rate pass and players on top of it
    assert cols["game"]["graph_ops"] > cols["floor"]["graph_ops"] > cols["plain"]["graph_ops"]


def test_op_costs_times_each_op_of_the_recorded_graph_in_order():
    import torch  # noqa: PLC0415

    rep = step_replay
    x, w = torch.randn(8, 3, generator=torch.Generator().manual_seed(0)), torch.zeros(3)

    def step() -> None:
        w.add_(x.sum(0) * 0.5)

    ops = rep.op_costs(step, runs=3)
    assert [o["op"] for o in ops] == ["aten.sum.dim_IntList", "aten.mul.Tensor",
                                      "aten.add_.Tensor"]
    assert ops[0]["args"] == "float32[8, 3]"
    assert all(o["in_graph_us"] > 0 and o["alone_us"] > 0 for o in ops)
    # on the same w: recorded once, the graph run 3 times, add_ alone 5 × 200 times
    # (float32 rounding of 1 004 additions ≤ 1e-4 relative; one call more or less is 1e-3)
    assert torch.allclose(w, x.sum(0) * 0.5 * (1 + 3 + 1000), rtol=2e-4, atol=0.0)
