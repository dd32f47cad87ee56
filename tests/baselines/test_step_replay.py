"""benchmarks/step_replay.py: every column records and replays (a smoke run), and the
recorded graphs' op counts order the columns as their work does."""

from __future__ import annotations

from pathlib import Path

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]


def test_columns_record_replay_and_count_their_ops():
    rep = load_script(ROOT / "benchmarks" / "step_replay.py", "step_replay_under_test",
                      path_entry=ROOT / "benchmarks")
    out = rep.run(blocks=2, steps=2)
    cols = out["columns"]
    assert {"plain", "game", "lagrangian", "floor"} <= set(cols)
    for c in cols.values():
        assert c["graph_ops"] > 0
        assert all(len(c[k]) == 3 and c[k][0] <= c[k][1] <= c[k][2]
                   for k in ("eager", "replay", "python"))
    # the game does the plain step's work and the rate pass and players on top of it
    assert cols["game"]["graph_ops"] > cols["floor"]["graph_ops"] > cols["plain"]["graph_ops"]
