"""The examples run as written (in their quick mode): a user's own nn.Module through the
engine and in a hand-written loop with ConstrainedOptimizer."""

from __future__ import annotations

import json
import math
from pathlib import Path

from script_loader import load_script

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _module(name: str):
    return load_script(EXAMPLES / f"{name}.py")


def test_custom_module_through_the_engine(tmp_path, capsys):
    results = _module("custom_module_engine").main(["--quick", "--out", str(tmp_path)])
    assert results["training"]["steps"] == 30
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["solutions"] == results["solutions"]
    assert "stochastic: objective" in capsys.readouterr().out
    assert (tmp_path / "report.md").is_file()


def test_custom_module_in_a_hand_written_loop(capsys):
    out = _module("custom_module_loop").main(["--quick"])
    assert set(out) == {"final", "stochastic"}
    for v in out.values():
        assert 0.0 <= v["objective"] <= 1.0 and math.isfinite(v["worst_constraint"])
    assert "step 40:" in capsys.readouterr().out
