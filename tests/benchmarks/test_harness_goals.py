"""benchmarks/harness: the one goal builder (``results.goal``), its printer
(``results.print_goals``) and the summary's goals table (``report.render``), for the harness's
layout and for the older layouts committed results keep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.harness.report import render
from benchmarks.harness.results import goal, goal_line, print_goals

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("value", "target", "at_most", "met"), [
    (1.0, 2.0, True, True), (2.0, 2.0, True, True), (2.5, 2.0, True, False),
    (3.0, 2.0, False, True), (2.0, 2.0, False, True), (1.5, 2.0, False, False),
])
def test_goal_is_met_on_its_side_of_the_target(value, target, at_most, met):
    g = goal(value, target, at_most=at_most, worst="mlp_K8")
    assert g["met"] is met and g["value"] == value and g["target"] == target
    assert g["worst"] == "mlp_K8"
    # only an at-least goal says so: the at-most layout is the plain one
    assert ("at_most" in g) is (not at_most)
    line = goal_line("x", g)
    assert f"(target {'<=' if at_most else '>='} 2)" in line
    assert line.endswith(" met") is met
    if not met:
        assert line.endswith(f"NOT met, by {abs(value - target):.4g}")


def test_print_goals_one_line_per_goal_with_the_fields_shown(capsys):
    print_goals({"a": goal(1.25, 1.05, worst="linear_K2_game"), "b": goal(0.5, 1.0)},
                show=("worst",))
    assert capsys.readouterr().out.splitlines() == [
        "goal a: 1.25 (target <= 1.05) NOT met, by 0.2; worst linear_K2_game",
        "goal b: 0.5 (target <= 1) met",
    ]


def test_summary_reads_the_harness_layout_and_the_old_ones_alike():
    new = {"a": goal(1.5, 2.0), "b": goal(1.5, 2.0, at_most=False)}
    text = render({"goals": new}, "toy")
    assert "| a | 1.5 | 2 | met |" in text and "| b | 1.5 | >= 2 | NOT met |" in text
    # many_constraints' old "goal" key was the target; step_replay's old goal held game_ms
    # against cooper_ms and said "passed"; compare_trees' old one goal stood at the top level
    old = {"k": {"value": 1.5, "goal": 2.0, "met": True},
           "r": {"game_ms": 0.08, "cooper_ms": 0.11, "passed": True}}
    text = render({"goals": old}, "toy")
    assert "| k | 1.5 | 2 | met |" in text and "| r | 0.08 | 0.11 | met |" in text
    one = {"target": 1.05, "worst": "mlp_K8_eval", "value": 1.054, "met": False}
    assert "| goal | 1.054 | 1.05 | NOT met |" in render({"goal": one}, "toy")


def test_committed_step_replay_summary_shows_its_goal():
    path = ROOT / "benchmarks" / "results" / "step_replay_eager24c.json"
    g = json.loads(path.read_text())["goals"]["game_python_at_most_coopers"]
    assert g["passed"] and "| game_python_at_most_coopers | 0.07802 | 0.1135 | met |" in (
        path.with_suffix(".md").read_text())


def test_step_replay_writes_its_goal_in_the_harness_layout(tmp_path, monkeypatch, capsys):
    """The goal path needs cooper-optim's column; faked here so it runs without cooper."""
    from benchmarks.speed import step_replay

    def col(python_ms: float) -> dict:
        return {"graph_ops": 9, "eager": [1.0, 1.1, 1.2], "replay": [0.9, 1.0, 1.1],
                "python": [python_ms - 0.01, python_ms, python_ms + 0.01]}

    monkeypatch.setattr(step_replay, "run", lambda blocks, steps: {
        "cooper_missing": None, "columns": {"game": col(0.08), "cooper": col(0.11)}})
    out = tmp_path / "step_replay.json"
    monkeypatch.setattr("sys.argv", ["step_replay", "--blocks", "1", "--out", str(out)])
    step_replay.main()
    g = json.loads(out.read_text())["goals"]["game_python_at_most_coopers"]
    assert (g["value"], g["target"], g["met"]) == (0.08, 0.11, True)
    assert "goal game_python_at_most_coopers: 0.08 (target <= 0.11) met" in capsys.readouterr().out
