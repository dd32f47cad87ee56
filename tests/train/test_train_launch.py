"""``fairgames.train.sweeps.launch``: independent jobs as one Hydra multirun on a launcher plugin
(basic, joblib, submitit_local; submitit_slurm composed and instantiated, not submitted)."""

from __future__ import annotations

import importlib.util
import json
import os
import textwrap
from pathlib import Path

import pytest
from script_loader import load_script

from fairgames.train.sweeps.launch import (
    LAUNCHERS,
    LauncherError,
    check_launcher,
    launch,
    launcher_overrides,
    load_task,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def task_file(tmp_path):
    path = tmp_path / "tasks.py"
    path.write_text(textwrap.dedent("""
        import os

        import torch

        def moments(payload):
            xs = torch.tensor(payload["xs"], dtype=torch.float64)
            return {"mean": float(xs.mean()), "var": float(xs.var()), "pid": os.getpid(),
                    "threads": torch.get_num_threads()}

        def fails(payload):
            raise ValueError(f"bad payload {payload}")
    """))
    return path


PAYLOADS = [{"xs": [float(i), 2.0 * i + 1.0, -3.0 + i]} for i in range(4)]


def test_joblib_runs_every_job_in_its_own_process_in_order(task_file, tmp_path):
    """The values come back in payload order, equal to calling the task here; the jobs ran
    in worker processes with one torch thread each (they share this machine's cores)."""
    got = launch(f"{task_file}:moments", PAYLOADS, tmp_path / "w", "joblib", jobs=2)
    here = load_task(f"{task_file}:moments")
    for payload, value in zip(PAYLOADS, got, strict=True):
        want = here(payload)
        assert value["mean"] == want["mean"] and value["var"] == want["var"]
        assert value["pid"] != os.getpid() and value["threads"] == 1
    # Hydra's own sweep record beside each job's return value
    (launch_dir,) = (tmp_path / "w").iterdir()
    assert (launch_dir / "jobs" / "multirun.yaml").is_file()
    assert sorted(p.name for p in (launch_dir / "jobs").glob("[0-9]*")) == ["0", "1", "2", "3"]


def test_each_launch_has_its_own_directory(task_file, tmp_path):
    """A second launch never reads the first one's return values."""
    launch(f"{task_file}:moments", PAYLOADS[:1], tmp_path / "w", "basic")
    (second,) = launch(f"{task_file}:moments", PAYLOADS[1:2], tmp_path / "w", "basic")
    assert second["mean"] == pytest.approx(sum(PAYLOADS[1]["xs"]) / 3)
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["0001", "0002"]


def test_submitit_local_runs_the_jobs(task_file, tmp_path):
    got = launch(f"{task_file}:moments", PAYLOADS[:2], tmp_path, "submitit_local", jobs=2)
    assert [g["mean"] for g in got] == [load_task(f"{task_file}:moments")(p)["mean"]
                                        for p in PAYLOADS[:2]]
    assert all(g["pid"] != os.getpid() and g["threads"] == 1 for g in got)


def test_a_failing_job_fails_the_launch(task_file, tmp_path):
    with pytest.raises(LauncherError, match="multirun failed"):
        launch(f"{task_file}:fails", PAYLOADS[:1], tmp_path, "basic")


def test_unknown_or_missing_launchers_are_named(monkeypatch):
    with pytest.raises(LauncherError, match="unknown launcher 'ray'.*joblib"):
        check_launcher("ray")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if "submitit" in name else real(name, *a))
    with pytest.raises(LauncherError, match="pip install hydra-submitit-launcher"):
        check_launcher("submitit_slurm")
    check_launcher("joblib")


def test_bad_task_names_are_refused(tmp_path):
    with pytest.raises(LauncherError, match="module:function"):
        load_task("no_function_here")
    with pytest.raises(LauncherError, match="missing.py not found"):
        load_task(f"{tmp_path / 'missing.py'}:f")


def test_the_slurm_launcher_composes_and_instantiates():
    """The documented cluster set-up (docs/scaling.md) composes with fairgames' configs and
    builds the submitit Slurm launcher with its settings (no cluster here: not submitted)."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    import fairgames.train.config  # noqa: F401  (registers the schema)

    overrides = [*launcher_overrides("submitit_slurm", jobs=8),
                 "hydra.launcher.partition=cpu", "hydra.launcher.cpus_per_task=4",
                 "hydra.launcher.timeout_min=120", "hydra.launcher.mem_gb=8"]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    conf = cfg.hydra.launcher
    assert conf._target_.endswith("submitit_launcher.SlurmLauncher")
    assert (conf.partition, conf.cpus_per_task, conf.timeout_min, conf.mem_gb,
            conf.array_parallelism) == ("cpu", 4, 120, 8, 8)
    launcher = instantiate(conf)
    assert launcher.params["partition"] == "cpu" and launcher.params["array_parallelism"] == 8


def test_every_launcher_named_is_installed_with_the_test_extra():
    for name in LAUNCHERS:
        check_launcher(name)


def test_the_manifest_records_task_and_launcher(task_file, tmp_path):
    launch(f"{task_file}:moments", PAYLOADS[:1], tmp_path, "basic")
    manifest = json.loads((tmp_path / "0001" / "manifest.json").read_text())
    assert manifest["launcher"] == "basic" and manifest["payloads"] == PAYLOADS[:1]


def test_a_launcher_hydra_cannot_find_is_named_with_its_plugin():
    """scripts/train.py -m hydra/launcher=submitit_slurm without the plugin: Hydra's message
    and the package that provides the launcher."""
    from hydra.errors import ConfigCompositionException

    script = load_script(ROOT / "scripts" / "train.py", "train_script")
    missing = ConfigCompositionException(
        "In 'hydra/config': Could not find 'hydra/launcher/submitit_slurm'")
    assert script._message(missing).endswith("pip install hydra-submitit-launcher")
    other = ConfigCompositionException("Could not find 'problem/nosuch'")
    assert script._message(other) == str(other)
