"""Golden trajectories: every preset replays the 200 steps recorded before the game's refactor.

``tests/game/golden/record.py`` recorded them (θ, ω, λ, slacks, true and surrogate values per
step; snapshots' exact leaf values, the stochastic model's and the best iterate). Code that only
moves must reproduce them bit for bit on the machine kind they were recorded on (same torch
build and CPU kernels); elsewhere, and after a change that reorders floating-point operations,
every value must agree to 1e-5 relative (the issue's bound for a regenerated trajectory).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from script_loader import load_script

HERE = Path(__file__).resolve().parent / "golden"
golden = load_script(HERE / "record.py", "golden_record")

RECORDED = golden.load()
CASES = golden.cases()


def test_every_preset_and_problem_is_recorded():
    assert set(CASES) <= set(RECORDED)
    presets = {case[0] for case in CASES.values()}
    from fairgames.game import PRESETS
    assert presets == set(PRESETS)


@pytest.mark.parametrize("name", sorted(CASES))
def test_replays_the_recorded_trajectory(name):
    want = RECORDED[name]
    got = golden.play(*CASES[name])
    assert set(got) == set(want)
    exact = RECORDED["_fingerprint"] == golden.fingerprint()
    for key, ref in want.items():
        value = got[key]
        assert value.shape == ref.shape and value.dtype == ref.dtype, key
        if exact:
            assert torch.equal(value, ref), f"{name}: {key} differs from the recording"
        else:
            torch.testing.assert_close(value, ref, rtol=1e-5, atol=1e-7, msg=key)
