"""Several data sets in one run (paper 001, issue 47): ``data=sources`` — each source its own
data config, one table preprocessing for all, per-source splits and sampling, resume."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from fairgames.data import TablePreprocessor
from fairgames.train import ConfigError
from fairgames.train.data import load_splits, loaded_keys


def _frame(n: int, seed: int, shift: float = 0.0, labeled: bool = True) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    sex = rng.choice(["F", "M"], n)
    x1 = rng.normal(shift, 1.0, n)
    job = rng.choice(["a", "b", "c"], n)
    frame = pd.DataFrame({"x1": x1, "job": job, "sex": sex})
    if labeled:
        frame["y"] = (x1 + rng.normal(0, 0.5, n) > shift).astype(int)
    return frame


@pytest.fixture
def three_csvs(tmp_path):
    """D1, D2 labeled; D3 unlabeled, its file without a label column."""
    paths = {}
    for name, n, seed, shift, labeled in (("d1", 400, 0, 0.0, True), ("d2", 300, 1, 0.5, True),
                                          ("d3", 500, 2, 1.0, False)):
        paths[name] = tmp_path / f"{name}.csv"
        _frame(n, seed, shift, labeled).to_csv(paths[name], index=False)
    return paths


def _cfg(paths, **extra):
    sources = {
        "d1": {"name": "table", "path": str(paths["d1"]), "target": "y"},
        "d2": {"name": "table", "path": str(paths["d2"]), "target": "y"},
        "d3": {"name": "table", "path": str(paths["d3"]), "labeled": False},
    }
    for key, value in extra.items():
        sources[key] = {**sources.get(key, {}), **value}
    return {"name": "sources", "protected": "sex", "seed": None, "sources": sources}


def test_three_table_sources_share_the_first_labeled_sources_preprocessing(three_csvs):
    splits = load_splits(_cfg(three_csvs), seed=0)
    train = splits.train
    assert train.source_names == ["d1", "d2", "d3"] and train.unlabeled == ("d3",)
    # each source split by its own fractions (0.6 / 0.2 / 0.2 of its rows, stratified)
    for part, share in (("train", 0.6), ("validation", 0.2), ("test", 0.2)):
        counts = getattr(splits, part).source_counts()
        for name, n in (("d1", 400), ("d2", 300), ("d3", 500)):
            assert abs(counts[name] - share * n) <= 4, (part, name, counts)
    # ONE preprocessing, fitted on d1's training rows: an independent reference
    d1 = pd.read_csv(three_csvs["d1"])
    d1_train = load_splits({"name": "table", "path": str(three_csvs["d1"]), "target": "y",
                            "protected": "sex", "seed": 0}, seed=0)
    pre = d1_train.metadata["preprocessor"]
    assert splits.metadata["preprocessor"] == pre
    ref = TablePreprocessor.fit(d1, d1_train.metadata["split_indices"]["train"], target="y",
                                protected="sex")
    assert ref == pre
    d3 = pd.read_csv(three_csvs["d3"])
    rows3 = (train.sources == 2)
    x3 = train.features[rows3]
    # d3's rows are d3's file rows encoded with d1's means / std / categories
    fit_rows = d1["x1"].to_numpy()[d1_train.metadata["split_indices"]["train"]]
    mu, sd = fit_rows.mean(), fit_rows.std()
    got = np.sort(x3[:, 0].numpy() * sd + mu)
    want = np.sort(d3["x1"].to_numpy())
    assert np.isin(np.round(got, 3), np.round(want, 3)).all()
    assert train.labels[rows3].abs().sum().item() == 0      # no labels: zeros never read
    rec = splits.metadata["sources_record"]
    assert rec["d3"]["labeled"] is False and rec["d1"]["labeled"] is True
    assert rec["d2"]["rows"]["train"] == splits.train.source_counts()["d2"]
    assert len(rec["d1"]["files"][0]["sha256"]) == 64


def test_the_sources_own_protected_attribute_is_the_runs(three_csvs):
    cfg = _cfg(three_csvs, **{n: {"protected": "sex"} for n in ("d1", "d2", "d3")})
    cfg["protected"] = None
    splits = load_splits(cfg, seed=0)
    assert loaded_keys(cfg, splits)["protected"] == "sex"


def test_a_split_of_one_loader_makes_two_disjoint_sources():
    base = {"name": "synthetic", "n": 1000}
    cfg = {"name": "sources", "protected": "group", "seed": 3, "sources": {
        "early": {**base, "rows": {"part": "train", "range": [0.0, 0.5]}},
        "late": {**base, "rows": {"part": "train", "range": [0.5, 1.0],
                                  "split": [0.5, 0.25, 0.25]}}}}
    splits = load_splits(cfg, seed=0)
    whole = load_splits({**base, "protected": "group", "seed": 3}, seed=0).train
    feats = {name: torch.cat([getattr(splits, p).features[getattr(splits, p).sources == i]
                              for p in ("train", "validation", "test")])
             for i, name in enumerate(["early", "late"])}
    assert len(feats["early"]) + len(feats["late"]) == len(whole)
    rows = {tuple(r) for r in whole.features.tolist()}
    early, late = ({tuple(r) for r in f.tolist()} for f in feats.values())
    assert early | late == rows and not early & late
    counts = splits.train.source_counts()
    assert counts["late"] == pytest.approx(0.5 * len(feats["late"]), abs=3)


@pytest.mark.parametrize("change, message", [
    ({"d2": {"batch_sise": 8}}, r"data.sources.d2: unknown key\(s\) \['batch_sise'\]"),
    ({"d3": {"split": [0.9, 0.0, 0.1]}},
     r"source 'd3' has no rows in its validation split.*data.sources.d3.split"),
    ({"d1": {"labeled": False}, "d2": {"labeled": False}},
     r"no labeled table source"),
    ({"d2": {"batch_size": 0}}, r"data.sources.d2.batch_size=0"),
    ({"d3": {"categorical": ["job"]}}, r"data.sources.d3: \['categorical'\] are the encoding"),
    ({"d2": {"target": "x1"}}, r"data.sources.d2: target='x1'"),
])
def test_source_config_errors_name_the_source_and_the_remedy(three_csvs, change, message):
    with pytest.raises(ConfigError, match=message):
        load_splits(_cfg(three_csvs, **change), seed=0)


def test_a_table_with_other_columns_is_refused_naming_them(three_csvs, tmp_path):
    frame = pd.read_csv(three_csvs["d2"]).rename(columns={"job": "work"})
    frame.to_csv(tmp_path / "other.csv", index=False)
    cfg = _cfg(three_csvs, d2={"path": str(tmp_path / "other.csv")})
    with pytest.raises(ConfigError, match=r"'d2'.*missing \['job'\].*extra \['work'\]"):
        load_splits(cfg, seed=0)


def test_no_sources_is_refused():
    with pytest.raises(ConfigError, match="data.sources"):
        load_splits({"name": "sources", "protected": None, "seed": None, "sources": {}}, seed=0)


# --------------------------------------------------------------------------- runs
def _sources_override(paths, sizes=None) -> str:
    sizes = sizes or {}
    items = []
    for name in ("d1", "d2", "d3"):
        keys = ["name:table", f"path:'{paths[name]}'"]
        keys += ["target:y"] if name != "d3" else ["labeled:false"]
        if sizes.get(name) is not None:
            keys.append(f"batch_size:{sizes[name]}")
        items.append(f"{name}:{{{','.join(keys)}}}")
    return "data.sources={" + ",".join(items) + "}"


def _run_args(paths, sizes=None, steps=300):
    return ["data=sources", "data.protected=sex", _sources_override(paths, sizes),
            "problem=error", "problem.objective='error(source=\"d1\")'",
            "+problem.constraints.cover='ppr(source=\"d3\") <= 0.3'", "trainer=smoke",
            f"trainer.steps={steps}", "trainer.log_every=25", "trainer.snapshot_every=10",
            "optimizer.lr=0.05"]


def test_three_sources_end_to_end_meet_a_rate_on_the_unlabeled_one(train_run, three_csvs):
    result = train_run("sources", *_run_args(three_csvs), fast=False)
    config = result.results["config"]
    splits = load_splits(config["data"], config["seed"])
    d3 = splits.train.sources == 2
    # the constraint binds: d1's rule (x1 > 0) would call most of d3 positive
    assert (pd.read_csv(three_csvs["d3"])["x1"] > 0).mean() > 0.75
    with torch.no_grad():
        scores = result.model.eval()(splits.train.features).reshape(-1)
    assert float((scores[d3] > 0).float().mean()) <= 0.3 + 0.03     # the final model's
    cover = result.results["solutions"]["recommended"]["train"]["constraints"]["cover"]
    assert cover["violation"] <= 0.01
    block = result.results["sources"]
    assert set(block) == {"d1", "d2", "d3"} and block["d3"]["labeled"] is False
    # per source and split: rows, ppr and (labeled) error / base rate of the recommended
    # solution's hard predictions, against numpy on its own scores
    model = result.recommended.eval()
    for part in ("train", "test"):
        ds = getattr(splits, part)
        with torch.no_grad():
            p = (model.predict_proba(ds.features) if hasattr(model, "predict_proba")
                 else (model(ds.features).reshape(-1) > 0).float()).numpy()
        y, src = ds.labels.numpy(), ds.sources.numpy()
        for i, name in enumerate(["d1", "d2", "d3"]):
            got, rows = block[name]["metrics"][part], src == i
            assert got["rows"] == rows.sum()
            assert got["ppr"] == pytest.approx(p[rows].mean(), abs=1e-6)
            if name == "d3":
                assert "error" not in got and "base_rate" not in got
            else:
                err = (p[rows] * (1 - y[rows]) + (1 - p[rows]) * y[rows]).mean()
                assert got["error"] == pytest.approx(err, abs=1e-6)
                assert got["base_rate"] == pytest.approx(y[rows].mean(), abs=1e-6)
        # the headline error and the group table read labels: the labeled rows alone (d3's
        # placeholder zeros would count as negatives)
        labeled = src != 2
        head = result.results["solutions"]["recommended"][part]
        err = (p[labeled] * (1 - y[labeled]) + (1 - p[labeled]) * y[labeled]).mean()
        assert head["error"] == pytest.approx(err, abs=1e-6)
        overall = head["groups"]["overall"]
        assert overall["count"] == labeled.sum()
        assert overall["base_rate"] == pytest.approx(y[labeled].mean(), abs=1e-6)
    report = (result.run_dir / "report.md").read_text()
    assert "## Sources" in report and "| d3 |" in report


def test_a_minibatch_sources_run_stopped_and_resumed_ends_like_an_uninterrupted_one(
        train_run, three_csvs, tmp_path, same_run):
    args = [*_run_args(three_csvs, {"d2": 32, "d3": 64}, steps=60), "trainer.checkpoint_every=20",
            "trainer.log_every=5"]
    full = train_run("full", *args, fast=False)
    stopped = train_run("stopped", *args, "trainer.stop_after=33", run_dir=tmp_path, fast=False)
    assert stopped.results is None and stopped.engine.step == 33
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["engine"]["sampler"]
    assert state["kind"] == "sources" and state["samplers"]["d1"] is None
    resumed = train_run("resumed", *args, "trainer.resume=true", run_dir=tmp_path, fast=False)
    same_run(resumed, full)


def test_per_source_batches_with_a_trainer_batch_size_or_epochs_are_refused(train_run,
                                                                          three_csvs):
    with pytest.raises(ConfigError, match=r"trainer.batch_size=64.*data.sources"):
        train_run("both", *_run_args(three_csvs, {"d2": 32}, steps=5),
                  "trainer.batch_size=64", fast=False)
    # an epoch is a pass over one source's rows: which one is not for us to guess
    with pytest.raises(ConfigError, match=r"trainer.epochs=2.*trainer.steps"):
        train_run("epochs", *_run_args(three_csvs, {"d2": 32}, steps=5),
                  "trainer.epochs=2", fast=False)


@pytest.mark.slow      # two scripts/train.py processes: ~80 s on a busy machine
def test_the_command_line_names_the_sources_and_refuses_a_bad_source(three_csvs, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "train.py"

    def train(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(script), *args, f"hydra.run.dir={tmp_path}"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300,
                              check=False)

    done = train(*_run_args(three_csvs, {"d3": 64}, steps=20))
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("sources: "))
    assert "d1 (labeled, all rows per step" in line and "d3 (unlabeled, 64 rows per step" in line
    bad = [a.replace("labeled:false", "labelled:false") for a in _run_args(three_csvs, steps=5)]
    refused = train(*bad, "hydra.job.chdir=false")
    assert refused.returncode != 0
    assert "data.sources.d3: unknown key(s) ['labelled']" in refused.stderr, refused.stderr[-800:]
