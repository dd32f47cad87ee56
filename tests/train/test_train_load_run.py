"""``fairgames.load_run``: a finished run's solutions as predictors that reproduce its test
metrics, apply its table preprocessing to raw rows, sample a mixture as its weights say,
export to TorchScript, and a run directory of another format version is refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import fairgames
from fairgames.data import DataError, from_frame
from fairgames.game.solutions import StochasticModel
from fairgames.models import build_model
from fairgames.train import run
from fairgames.train.deploy.load import RUN_FILE, RunFormatError, load_run
from fairgames.train.deploy.predictor import Predictor, read_export_record

SHORT = ["trainer=smoke", "trainer.steps=30", "trainer.bootstrap=0", "trainer.checkpoint_every=0"]
SOLUTIONS = ("recommended", "best_iterate", "final", "stochastic")


def people(n: int = 600, seed: int = 0) -> pd.DataFrame:
    """Mixed types, missing values, a three-valued protected column, a 0/1 target."""
    rng = np.random.default_rng(seed)
    race = rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2])
    age = rng.normal(40, 10, n).round()
    job = rng.choice(["teacher", "nurse", "clerk"], n).astype(object)
    p = 1 / (1 + np.exp(-(0.08 * (age - 40) + (race == "a") - 0.3)))
    df = pd.DataFrame({"age": age, "job": job, "race": race, "y": (rng.random(n) < p).astype(int)})
    df.loc[rng.choice(n, 30, replace=False), "age"] = np.nan
    df.loc[rng.choice(n, 30, replace=False), "job"] = np.nan
    return df


@pytest.fixture(scope="module")
def table_run(compose_cfg, tmp_path_factory):
    root = tmp_path_factory.mktemp("load_run")
    path = root / "people.csv"
    people().to_csv(path, index=False)
    run(compose_cfg("data=table", f"data.path={path}", "data.target=y", "data.protected=race",
                    "problem=demographic_parity", *SHORT), run_dir=root / "run")
    return root / "run", path


@pytest.fixture(scope="module")
def mlp_run(compose_cfg, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("mlp_run")
    run(compose_cfg("data=synthetic", "data.n=800", "model=mlp", "model.hidden=[8]",
                    "problem=equal_opportunity", *SHORT), run_dir=run_dir)
    return run_dir


def _reference(p: np.ndarray, y: np.ndarray, g: np.ndarray, names: list[str]) -> dict:
    """Error and per-group positive rate and TPR of a randomised classifier with
    P(ŷ = 1) = p, in float64 numpy."""
    out = {"error": float(np.mean(y * (1 - p) + (1 - y) * p)), "groups": {}}
    for k, name in enumerate(names):
        m = g == k
        out["groups"][f"race={name}"] = {"positive_rate": float(p[m].mean()),
                                        "tpr": float((p[m] * y[m]).sum() / y[m].sum())}
    return out


def test_load_run_reproduces_the_runs_test_metrics(table_run):
    run_dir, _ = table_run
    loaded = fairgames.load_run(run_dir)
    results = json.loads((run_dir / "results.json").read_text())
    test = loaded.data_splits().test
    y, g = test.labels.double().numpy(), test.groups["race"].numpy()
    names = test.group_names["race"]
    for name in SOLUTIONS:
        p = loaded.solutions[name].predict_proba(test.features).numpy()
        ref = _reference(p, y, g, names)
        metrics = results["solutions"][name]["test"]
        assert metrics["error"] == pytest.approx(ref["error"], abs=1e-6), name
        for group, rates in ref["groups"].items():
            for rate, value in rates.items():
                assert metrics["groups"][group][rate] == pytest.approx(value, abs=1e-6), \
                    (name, group, rate)
    assert loaded.stochastic.is_mixture and len(loaded.stochastic.weights) > 1


def test_raw_rows_go_through_the_runs_preprocessing(table_run):
    run_dir, path = table_run
    loaded = load_run(run_dir)
    df = pd.read_csv(path)
    split = from_frame(df, target="y", protected="race", seed=0)
    rows = df.iloc[split.metadata["split_indices"]["test"]]
    # neither the target nor the protected column (not a feature here) is needed
    raw = rows.drop(columns=["y", "race"])
    for name in SOLUTIONS:
        p = loaded.solutions[name]
        assert torch.equal(p.predict_proba(raw), p.predict_proba(split.test.features)), name
    with pytest.raises(DataError, match="job"):
        loaded.recommended.predict_proba(raw.drop(columns="job"))


def test_the_model_settings_rebuild_the_model(mlp_run, table_run):
    for run_dir in (mlp_run, table_run[0]):
        meta = torch.load(run_dir / "final.pt", weights_only=True)["metadata"]["model"]
        model = build_model(**meta)          # the record is build_model's arguments
        assert type(model).__name__ == {"mlp": "MLP", "linear": "LinearModel"}[meta["name"]]


def test_a_packaged_data_run_takes_encoded_features_and_refuses_a_frame(mlp_run):
    loaded = load_run(mlp_run)
    assert loaded.preprocessor is None and loaded.record["preprocess"] is None
    test = loaded.data_splits().test
    assert loaded.record["features"] == list(test.feature_names)
    results = json.loads((mlp_run / "results.json").read_text())
    p = loaded.final.predict_proba(test.features.numpy())           # an array works too
    y = test.labels.double().numpy()
    assert results["solutions"]["final"]["test"]["error"] == pytest.approx(
        float(np.mean(y * (1 - p.numpy()) + (1 - y) * p.numpy())), abs=1e-6)
    frame = pd.DataFrame(test.features.numpy(), columns=test.feature_names)
    with pytest.raises(DataError, match="no table preprocessing"):
        loaded.final.predict_proba(frame)


@pytest.mark.parametrize("change, says", [
    (lambda rec: {**rec, "version": 2}, r"format version 2; this fairgames reads version 1"),
    (lambda rec: {**rec, "format": "other"}, "not a fairgames run record"),
    (None, "has no run.json"),
], ids=["newer", "foreign", "missing"])
def test_a_run_directory_of_another_format_is_refused(mlp_run, tmp_path, change, says):
    copy = tmp_path / "copy"
    shutil.copytree(mlp_run, copy)
    record = json.loads((copy / RUN_FILE).read_text())
    if change is None:
        (copy / RUN_FILE).unlink()
    else:
        (copy / RUN_FILE).write_text(json.dumps(change(record)))
    with pytest.raises(RunFormatError, match=says):
        load_run(copy)


def test_an_unfinished_run_is_named(mlp_run, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(mlp_run, copy)
    (copy / "results.json").unlink()
    with pytest.raises(RunFormatError, match="has not finished; resume it"):
        load_run(copy)


def _two_lines() -> tuple[torch.nn.Module, torch.nn.Module]:
    a, b = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    with torch.no_grad():
        a.weight.copy_(torch.tensor([[1.0, 0.5]]))
        a.bias.fill_(0.1)
        b.weight.copy_(torch.tensor([[-0.5, 1.0]]))
        b.bias.fill_(-0.2)
    return a, b


@pytest.mark.parametrize("label_kind", ["binary", "real"])
def test_seeded_draws_of_a_mixture_match_its_expectation(label_kind):
    a, b = _two_lines()
    predictor = Predictor(StochasticModel.from_modules([a, b], weights=[0.3, 0.7]),
                          label_kind=label_kind)
    x = torch.randn(10, 2, generator=torch.Generator().manual_seed(1))
    n = 10_000                                        # 10 rows x 10^4 draws = 10^5 draws
    rows = x.repeat_interleave(n, dim=0)
    draws = predictor.predict(rows, seed=0).double().reshape(10, n)
    expected = predictor.predict_proba(x)
    s = predictor.scores(x).double()                  # [2, 10]
    values = s if label_kind == "real" else (s > 0).double()
    w = torch.tensor([0.3, 0.7], dtype=torch.float64)[:, None]
    assert torch.allclose(expected, (w * values).sum(0))          # the expectation, by hand
    var = (w * (values - expected) ** 2).sum(0)
    assert (var > 0).sum() >= 3                        # the members disagree on several rows
    se = (var / n).sqrt()
    assert ((draws.mean(1) - expected).abs() <= 4 * se + 1e-12).all()
    assert torch.equal(predictor.predict(rows, seed=0), predictor.predict(rows, seed=0))
    assert not torch.equal(predictor.predict(rows, seed=0), predictor.predict(rows, seed=1))


def test_deterministic_solutions_export_to_torchscript(mlp_run, table_run, tmp_path):
    for run_dir in (mlp_run, table_run[0]):
        loaded = load_run(run_dir)
        x = loaded.data_splits().test.features
        for name in ("best_iterate", "final"):
            path = tmp_path / f"{run_dir.name}-{name}.pt"
            loaded.solutions[name].to_torchscript(path)
            scripted = torch.jit.load(str(path))
            with torch.no_grad():
                assert torch.equal(scripted(x), loaded.solutions[name].scores(x)), name
            assert read_export_record(path)["decision"] == loaded.solutions[name].decision
        with pytest.raises(ValueError, match="is a mixture of .* cannot be exported"):
            loaded.stochastic.to_torchscript(tmp_path / "mix.pt")


def test_a_fit_run_needs_the_module_to_load(tmp_path):
    from fairgames.data import make_synthetic
    from fairgames.train import fit
    splits = make_synthetic(n=300, d=3, seed=0)
    fit(torch.nn.Linear(3, 1), "error", splits, protected="group",
        trainer={"steps": 4, "bootstrap": 0}, run_dir=tmp_path)
    with pytest.raises(RunFormatError, match=r"pass load_run\(\.\.\., model="):
        load_run(tmp_path)
    loaded = load_run(tmp_path, model=torch.nn.Linear(3, 1))
    assert loaded.final.predict_proba(splits.test.features).shape == (60,)


def test_a_grid_rounded_regressor_is_traced_when_it_cannot_be_scripted(tmp_path):
    from fairgames.models import GridRounded
    inner = build_model("linear", 3, output="unit")
    with torch.no_grad():
        inner.linear.weight.copy_(torch.tensor([[1.0, -2.0, 0.5]]))
    predictor = Predictor(GridRounded(inner, 10), label_kind="real", input_dim=3)
    x = torch.randn(200, 3, generator=torch.Generator().manual_seed(0))
    scripted = predictor.to_torchscript(tmp_path / "rounded.pt")
    assert torch.equal(scripted(x), predictor.scores(x))
    assert len(predictor.scores(x).unique()) > 3          # several cells, not a constant
    with pytest.raises(ValueError, match="give input_dim"):
        Predictor(GridRounded(inner, 10), label_kind="real").to_torchscript()


ROOT = Path(__file__).resolve().parents[2]


def _predict(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "predict.py"), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("solution", ["recommended", "stochastic", "final"])
def test_predict_script_matches_predict_proba_chunk_by_chunk(table_run, tmp_path, solution):
    run_dir, _ = table_run
    new = people(n=250, seed=1).drop(columns="y")         # new rows, missing values included
    new.insert(0, "id", np.arange(1000, 1250))
    new.to_csv(tmp_path / "new.csv", index=False)
    out = _predict(str(run_dir), "--data", str(tmp_path / "new.csv"), "--out",
                   str(tmp_path / "preds.csv"), "--solution", solution, "--chunk-size", "37",
                   "--keep", "id", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    preds = pd.read_csv(tmp_path / "preds.csv")
    assert list(preds.columns) == ["id", "predict_proba", "predict"]
    assert preds["id"].tolist() == list(range(1000, 1250))
    predictor = load_run(run_dir).solutions[solution]
    expected = predictor.predict_proba(new).numpy()       # the whole table at once
    np.testing.assert_array_equal(preds["predict_proba"].to_numpy(), expected)
    assert set(preds["predict"].unique()) <= {0.0, 1.0}
    if not predictor.is_mixture:
        np.testing.assert_array_equal(preds["predict"].to_numpy(), expected)


def test_predict_script_on_a_packaged_data_run_reads_the_encoded_features(mlp_run, tmp_path):
    loaded = load_run(mlp_run)
    test = loaded.data_splits().test
    pd.DataFrame(test.features.numpy(), columns=test.feature_names).to_parquet(
        tmp_path / "x.parquet")
    out = _predict(str(mlp_run), "--data", str(tmp_path / "x.parquet"), "--out",
                   str(tmp_path / "p.csv"), "--chunk-size", "50", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    np.testing.assert_array_equal(pd.read_csv(tmp_path / "p.csv")["predict_proba"].to_numpy(),
                                  loaded.recommended.predict_proba(test.features).numpy())
    bad = _predict(str(tmp_path), "--data", str(tmp_path / "x.parquet"), "--out",
                   str(tmp_path / "q.csv"), cwd=tmp_path)
    assert bad.returncode == 1 and "has no run.json" in bad.stderr


# --------------------------------------------------------------------------- issue 54/55: files
def _encoded_test_frame(mlp_run) -> tuple[pd.DataFrame, np.ndarray]:
    loaded = load_run(mlp_run)
    test = loaded.data_splits().test
    frame = pd.DataFrame(test.features.numpy(), columns=test.feature_names)
    return frame, loaded.recommended.predict_proba(test.features).numpy()


def test_predict_may_write_over_its_own_input(mlp_run, tmp_path):
    # issue 54: --out opened first truncated the input to 0 bytes, then EmptyDataError
    frame, expected = _encoded_test_frame(mlp_run)
    path = tmp_path / "x.csv"
    frame.to_csv(path, index=False)
    out = _predict(str(mlp_run), "--data", str(path), "--out", str(path), "--chunk-size", "50",
                   "--keep", *frame.columns[:1], cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    preds = pd.read_csv(path)
    assert len(preds) == len(frame)
    np.testing.assert_allclose(preds["predict_proba"].to_numpy(), expected, rtol=1e-6)
    assert [p.name for p in tmp_path.iterdir()] == ["x.csv"]      # no temporary file left


@pytest.mark.parametrize("same", [False, True], ids=["other_out", "out_is_data"])
def test_a_bad_value_in_a_later_chunk_leaves_no_partial_output(mlp_run, tmp_path, same):
    frame, _ = _encoded_test_frame(mlp_run)
    frame = frame.astype(object)
    frame.iloc[len(frame) - 3, 1] = "oops"             # in the last chunk of 50 rows
    data = tmp_path / "x.csv"
    frame.to_csv(data, index=False)
    before = data.read_bytes()
    target = data if same else tmp_path / "p.csv"
    if not same:
        target.write_text("an earlier output\n")
    out = _predict(str(mlp_run), "--data", str(data), "--out", str(target), "--chunk-size",
                   "50", cwd=tmp_path)
    assert out.returncode == 1, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and str(data) in out.stderr
    assert "could not convert" in out.stderr or "must be numbers" in out.stderr
    assert data.read_bytes() == before                  # the input as it was
    if not same:
        assert target.read_text() == "an earlier output\n"  # the old output untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({data.name, target.name})


@pytest.mark.parametrize("header, says", [(False, "is empty"), (True, "has a header but no rows")],
                         ids=["zero_bytes", "header_only"])
def test_an_empty_csv_is_named_and_writes_nothing(mlp_run, tmp_path, header, says):
    # issue 55: raw EmptyDataError; a header-only file gave a header-only output
    data = tmp_path / "x.csv"
    features = load_run(mlp_run).record["features"]
    data.write_text(",".join(features) + "\n" if header else "")
    out = _predict(str(mlp_run), "--data", str(data), "--out", str(tmp_path / "p.csv"),
                   cwd=tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert says in out.stderr and str(data) in out.stderr
    assert not (tmp_path / "p.csv").exists()


# --------------------------------------------------------------------------- damaged run files
def _cut(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip(path: Path) -> None:
    """One bit flipped in the middle of the first tensor record's bytes (not in a header)."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if "/data/" in i.filename)
    data = bytearray(path.read_bytes())
    # the local header's own name and extra lengths (torch pads the extra field to align data)
    name_len, extra_len = (int.from_bytes(data[info.header_offset + k:info.header_offset + k + 2],
                                          "little") for k in (26, 28))
    at = info.header_offset + 30 + name_len + extra_len + info.file_size // 2
    data[at] ^= 0x10
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("file, damage, says", [
    ("results.json", lambda p: p.write_text(""), "is empty"),
    ("results.json", _cut, "is damaged (not valid JSON"),
    ("preprocess.json", lambda p: p.write_text(""), "is empty"),
    ("preprocess.json", lambda p: p.write_text('{"format": "x"}'), "cannot be used"),
    ("recommended.pt", lambda p: p.write_bytes(b""), "the file is empty"),
    ("recommended.pt", _cut, "truncated or damaged"),
    ("recommended.pt", _flip, "fails its checksum"),
    ("recommended.pt", lambda p: p.unlink(), "is missing"),
], ids=["results_empty", "results_cut", "pre_empty", "pre_foreign", "pt_empty", "pt_cut",
        "pt_flipped", "pt_missing"])
def test_a_damaged_run_file_is_named_with_the_remedy(table_run, tmp_path, file, damage, says):
    # issue 55: raw JSONDecodeError, bare EOFError, "PytorchStreamReader failed"
    copy = tmp_path / "copy"
    shutil.copytree(table_run[0], copy)
    damage(copy / file)
    with pytest.raises(RunFormatError) as info:
        load_run(copy)
    message = str(info.value)
    assert str(copy / file) in message and says in message
    assert f"run_dir={copy} overwrite=true" in message      # no checkpoint: train again


def test_predict_names_a_damaged_run_file(mlp_run, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(mlp_run, copy)
    (copy / "results.json").write_text("")
    (tmp_path / "x.csv").write_text("x0\n1\n")
    out = _predict(str(copy), "--data", str(tmp_path / "x.csv"), "--out",
                   str(tmp_path / "p.csv"), cwd=tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert f"{copy / 'results.json'} is empty" in out.stderr


def test_a_run_missing_its_solution_says_to_resume_and_resuming_restores_it(compose_cfg,
                                                                            tmp_path):
    run_dir = tmp_path / "run"
    args = ("data=synthetic", "data.n=800", "problem=equal_opportunity", "trainer=smoke",
            "trainer.steps=20", "trainer.bootstrap=0", "trainer.checkpoint_every=10")
    run(compose_cfg(*args), run_dir=run_dir)
    expected = load_run(run_dir).recommended.state_dict()
    (run_dir / "recommended.pt").unlink()
    with pytest.raises(RunFormatError, match=rf"trainer.resume={run_dir}\)"):
        load_run(run_dir)
    # the remedy works: the resumed run writes its outputs again, the same solution
    run(compose_cfg(*args, f"trainer.resume={run_dir}"), run_dir=run_dir,
        overrides=[f"trainer.resume={run_dir}"])
    again = load_run(run_dir).recommended.state_dict()
    assert sorted(again) == sorted(expected)
    for key, value in expected.items():
        torch.testing.assert_close(again[key], value, rtol=0, atol=0)
