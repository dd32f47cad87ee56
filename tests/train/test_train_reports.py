"""What a run leaves for people to read: ``train.log`` holds the run's log, Hydra's record
lands in ``run_dir``, per-group tables carry counts and between-group difference and ratio
summaries (checked against fairlearn's ``MetricFrame``) and export as CSV, and the dynamics
plot names its split, draws the bound, smooths minibatch curves and marks infinite values."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_run_dir_holds_the_hydra_record_and_the_log(tmp_path):
    run_dir = tmp_path / "out" / "run"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), "trainer=smoke",
                           "data=synthetic", "data.n=600", "trainer.bootstrap=0",
                           f"run_dir={run_dir}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    assert not (tmp_path / "runs").exists()              # no stray runs/<date>/... record
    log = (run_dir / "train.log").read_text()
    assert "step 20/40: objective" in log and "step 40/40: objective" in log
    summary = done.stdout.splitlines()[0]
    assert summary.startswith(f"{run_dir}: recommended") and summary in log
    assert "[fairgames.train.engine]" not in done.stdout    # the console shows prints only
