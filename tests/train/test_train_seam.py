"""The seam between the run pipeline and a paper family (fairgames.train.method): a method and
an extension defined in a module outside the package (``tests/seam_family.py``), registered
by name and run from the command line (``families=[seam_family]``) and from ``fit``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
SMALL = ["data=synthetic", "data.n=1200", "trainer=smoke", "trainer.bootstrap=0",
         "trainer.tensorboard=false", "trainer.plots=false"]


def cli(*args: str, cwd: Path = TESTS) -> subprocess.CompletedProcess[str]:
    """``scripts/train.py`` in a fresh process from ``cwd`` (where seam_family.py lies, as a
    user's module lies beside the command), with this checkout's fairgames."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_a_method_defined_outside_the_package_runs_from_the_command_line(tmp_path):
    out = cli("families=[seam_family]", "algorithm=plain_erm", "algorithm.erm_steps=30",
              *SMALL, f"run_dir={tmp_path}")
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    training = results["training"]
    assert training["preset"] == "plain_erm" and training["steps"] == 30
    assert training["snapshots"]["steps"] == [10, 20, 30]
    assert training["plain_erm"] == {"snapshots": 3}
    assert results["config"]["families"] == ["seam_family"]
    # the pipeline scored, selected and recommended its candidates as for any method
    assert set(results["solutions"]) == {"final", "best_iterate", "stochastic", "recommended"}
    assert training["best_iterate"]["step"] in (10, 20, 30)
    assert "plain_erm: 30 unconstrained steps" in out.stdout
    assert (tmp_path / "recommended.pt").exists()


def test_an_extension_defined_outside_the_package_adds_a_player_and_a_block(tmp_path):
    out = cli("families=[seam_family]", "probe.name=on", "trainer.steps=40", *SMALL,
              f"run_dir={tmp_path}")
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["probe"]["rounds"] == 40        # its player played every round of the game
    rec = results["solutions"]["recommended"]["train"]["error"]
    assert results["probe"]["recommended_error"] == pytest.approx(rec, abs=1e-12)
    assert "probe: 40 rounds" in out.stdout
    assert results["config"]["probe"] == {"name": "on"}


def test_without_the_family_its_names_are_refused_with_exit_2(tmp_path):
    out = cli("algorithm=plain_erm", *SMALL, f"run_dir={tmp_path}")
    assert out.returncode == 2 and "plain_erm" in out.stderr
    missing = cli("families=[no_such_family]", *SMALL, f"run_dir={tmp_path}")
    assert missing.returncode == 2
    assert "families: cannot import 'no_such_family'" in missing.stderr


@pytest.fixture
def seam_family():
    import seam_family as family

    from fairgames.train.method import (
        register_extension,
        register_group,
        register_method,
        unregister_extension,
        unregister_group,
        unregister_method,
    )

    register_method(family.METHOD)
    register_extension(family.EXTENSION)
    register_group("probe", family.ProbeConfig)
    yield family
    unregister_method(family.METHOD)
    unregister_extension(family.EXTENSION)
    unregister_group("probe")


def test_fit_plays_a_registered_method_by_name(seam_family):
    from fairgames.data import make_synthetic
    from fairgames.train import fit

    splits = make_synthetic(n=600, d=3, seed=0)
    torch.manual_seed(0)
    result = fit(torch.nn.Linear(3, 1), "equal_opportunity", splits, protected="group",
                 algorithm={"name": "plain_erm", "erm_steps": 20},
                 trainer={"bootstrap": 0})
    training = result.results["training"]
    assert training["preset"] == "plain_erm" and training["snapshots"]["steps"] == [10, 20]
    assert result.engine is None and "probe" not in result.results


def test_a_method_record_that_breaks_the_schema_is_refused_at_its_source():
    import jsonschema

    from fairgames.train.method import training_record

    with pytest.raises(jsonschema.ValidationError, match="-1"):
        training_record(steps=-1, preset="x", multipliers={}, slacks={},
                        likely_infeasible=False, seconds=0.0, snapshots=[], choice={},
                        constraint_data={}, problem={})


def test_a_resumed_run_imports_the_families_it_recorded(tmp_path):
    run_dir = tmp_path / "run"
    first = cli("families=[seam_family]", "probe.name=on", "trainer.steps=40",
                "trainer.stop_after=20", "trainer.checkpoint_every=10", *SMALL,
                f"run_dir={run_dir}")
    assert first.returncode == 0, first.stderr[-3000:]
    assert not (run_dir / "results.json").exists()
    # the command line names no family: the checkpoint's config does
    elsewhere = cli(f"trainer.resume={run_dir}", cwd=tmp_path)   # seam_family not found here
    assert elsewhere.returncode == 2
    assert "families: cannot import 'seam_family'" in elsewhere.stderr
    resumed = cli(f"trainer.resume={run_dir}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["probe"]["rounds"] == 40 and results["training"]["steps"] == 40


def test_a_part_of_the_run_only_one_extension_may_own_is_refused_to_two():
    from fairgames.train.config import ConfigError
    from fairgames.train.method import (
        Extension,
        one_extension,
        register_extension,
        unregister_extension,
    )

    class Claims(Extension):
        def __init__(self, group: str, answer: object) -> None:
            self.group, self.answer = group, answer

    quiet, first, second = Claims("quiet_a", None), Claims("claim_b", 1), Claims("claim_c", 2)
    for ext in (quiet, first):
        register_extension(ext)
    try:
        assert one_extension("answer", lambda e: getattr(e, "answer", None)) == 1
        register_extension(second)
        with pytest.raises(ConfigError, match=r"two extensions answer \(claim_b, claim_c\)"):
            one_extension("answer", lambda e: getattr(e, "answer", None))
    finally:
        for ext in (quiet, first, second):
            unregister_extension(ext)
