"""MLflow beside TensorBoard (issue 52, trainer.mlflow): the same scalars by step, the run's
settings as params, its files as artifacts, one MLflow run across a resume; a store MLflow
refuses is one config error."""

from __future__ import annotations

import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fairgames.train import ConfigError, run
from fairgames.train.loop import tracking
from fairgames.train.loop.tracking import mlflow_key
from fairgames.train.results.outputs import hparams_of

mlflow = pytest.importorskip("mlflow", reason="MLflow is not installed (the test extra has "
                                              "mlflow-skinny)")
SHORT = ["data=synthetic", "data.n=800", "trainer=smoke", "trainer.bootstrap=0",
         "trainer.plots=true"]


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A local MLflow store (sqlite; its artifacts under the test's directory)."""
    monkeypatch.chdir(tmp_path)                    # MLflow's default artifact root: ./mlruns
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return mlflow.MlflowClient(uri)


def test_a_run_sends_tensorboards_scalars_its_settings_and_its_files(store, compose_cfg,
                                                                     tmp_path):
    result = run(compose_cfg(*SHORT), run_dir=tmp_path / "run")
    run_id = json.loads((tmp_path / "run" / "mlflow.json").read_text())["run_id"]
    info = store.get_run(run_id)
    assert info.info.status == "FINISHED" and info.info.run_name == "run"
    ea = EventAccumulator(str(tmp_path / "run"))
    ea.Reload()
    for tag in ("objective/true", "constraint/max_violation", "validation/objective"):
        events = [(e.step, pytest.approx(e.value)) for e in ea.Scalars(tag)]
        history = [(m.step, m.value) for m in store.get_metric_history(run_id, tag)]
        assert sorted(history) == events
    assert set(info.data.params) == {mlflow_key(k) for k in hparams_of(result.results["config"])}
    artifacts = {a.path for a in store.list_artifacts(run_id)}
    assert {"results.json", "report.md", "dynamics.png", "groups.csv"} <= artifacts


def test_a_resumed_run_continues_its_mlflow_run(store, compose_cfg, tmp_path):
    stopped = run(compose_cfg(*SHORT, "trainer.stop_after=20"), run_dir=tmp_path / "run")
    assert stopped.results is None
    run_id = json.loads((tmp_path / "run" / "mlflow.json").read_text())["run_id"]
    assert store.get_run(run_id).info.status == "KILLED"       # stopped, not finished
    run(compose_cfg(*SHORT, f"trainer.resume={tmp_path / 'run'}"), run_dir=tmp_path / "run")
    assert json.loads((tmp_path / "run" / "mlflow.json").read_text())["run_id"] == run_id
    assert store.get_run(run_id).info.status == "FINISHED"
    steps = [m.step for m in store.get_metric_history(run_id, "objective/true")]
    assert sorted(steps) == [10, 20, 30, 40]
    assert len(store.search_runs([store.get_run(run_id).info.experiment_id])) == 1


def test_auto_needs_a_tracking_store_and_true_needs_the_package(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert not tracking.wanted("auto", {})
    assert tracking.wanted("auto", {"MLFLOW_TRACKING_URI": "sqlite:///x.db"})
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda name: None)
    assert not tracking.wanted("auto", {"MLFLOW_TRACKING_URI": "sqlite:///x.db"})
    with pytest.raises(ImportError, match="pip install mlflow-skinny"):
        tracking.wanted(True, {})


def test_a_store_mlflow_refuses_is_one_config_error(compose_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nosuchscheme://x")
    with pytest.raises(ConfigError, match="trainer.mlflow: MLflow cannot open the tracking "
                                          "store 'nosuchscheme://x'"):
        run(compose_cfg(*SHORT), run_dir=tmp_path / "run")
