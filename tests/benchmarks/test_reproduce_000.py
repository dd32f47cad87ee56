"""The reproduction script's pure parts (no training): cell keys, Hydra overrides that
compose, selection on validation, the table arithmetic. Fast."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks.reproduce import reproduce_000

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rep():
    return reproduce_000


def test_cell_keys_are_unique(rep):
    args = {"datasets": ["compas", "adult"], "splits": 2, "theta_lrs": [0.1, 1.0],
            "lambda_lrs": [0.1, 1.0], "no_ablation": False, "ablation_splits": 1}
    unc, rest = rep.build_cells(args)
    keys = [rep.cell_key(c) for c in unc + rest]
    assert len(keys) == len(set(keys))
    assert len(unc) == 2 * 2 * 2
    assert rep.cell_key({"kind": "kld", "dataset": "law", "split": 1,
                         "algorithm": "algorithm2", "theta_lr": 0.1,
                         "lambda_lr": 1.0}) == "kld_law_s1_algorithm2_th0.1_la1"


@pytest.mark.parametrize("kind", ["unc", "kld", "kld_lp", "f1", "f1_lp", "ablation"])
def test_overrides_compose(rep, kind):
    from hydra import compose, initialize_config_dir

    import fairgames.train.config  # noqa: F401
    from fairgames.train import validate

    cell = {"kind": kind, "dataset": "crime", "split": 2, "algorithm": "algorithm2",
            "theta_lr": 0.1, "lambda_lr": 1.0}
    if kind == "ablation":
        cell = {**cell, "algorithm": "spade", "surrogate": "sigmoid"}
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=rep.overrides(cell, 100, 0.3, "train", "adam",
                                                       "adam", "random", 0.1, "validation"))
    validate(cfg)
    # the two-dataset game for constrained runs; UncError has no constraint to play
    assert cfg.trainer.constraint_split == ("train" if kind == "unc" else "validation")
    assert cfg.algorithm.multiplier_optimizer == (None if kind == "unc" else "adam")
    assert cfg.data.seed == 2 and cfg.optimizer.lr == 0.1 and cfg.trainer.steps == 100
    assert cfg.optimizer.name == "adam" and cfg.trainer.selection_split == "train"
    assert cfg.data.split == "random" and cfg.optimizer.weight_decay == 0.1
    # the same run; only the stochastic output differs (uniform vs LP mixture)
    assert cfg.trainer.stochastic == ("shrunk" if kind in ("kld_lp", "f1_lp") else "uniform")
    if kind in ("kld", "kld_lp"):
        assert cfg.problem.variables.unc_error == 0.3
        assert "unc_error" in cfg.problem.constraints.error_bound
    if kind in ("f1", "f1_lp"):
        assert cfg.problem.protected_group == "low"
    if kind == "ablation":
        assert cfg.algorithm.name == "spade" and cfg.algorithm.surrogate == "sigmoid"
        assert cfg.problem.name == "kld"
        assert rep.cell_key(cell) == "ablation_crime_s2_spade_sigmoid_th0.1_la1"


def test_constraint_fraction_composes_and_is_checked(rep, capsys):
    from hydra import compose, initialize_config_dir

    import fairgames.train.config  # noqa: F401
    from fairgames.train import validate

    cell = {"kind": "f1_lp", "dataset": "crime", "split": 0, "algorithm": "algorithm3",
            "theta_lr": 0.1, "lambda_lr": 1.0}
    ov = rep.overrides(cell, 100, None, "train", "adam", "ogd", "default", 0.0, "holdout",
                       0.25)
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=ov)
    validate(cfg)
    assert cfg.trainer.constraint_split == "holdout"
    assert cfg.trainer.constraint_fraction == 0.25
    # the script's default share is the one the committed cells ran with, the engine's then
    from fairgames.train.config import TrainerConfig

    assert rep.DEFAULT_CONSTRAINT_FRACTION == TrainerConfig().constraint_fraction
    # a cell saved before the share was pinned (no override: the default) is a cell of the
    # default share, and of no other
    legacy = [o for o in ov if "constraint_fraction" not in o]
    args = {"steps": 100, "selection": "train", "optimizer": "adam",
            "constraint_split": "holdout"}
    rep.check_cell_protocol({"cell": cell, "overrides": legacy}, args, "legacy")
    with pytest.raises(rep.ProtocolMismatch) as e:
        rep.check_cell_protocol({"cell": cell, "overrides": legacy},
                                {**args, "constraint_fraction": 0.25}, "legacy")
    assert (e.value.key, e.value.ran, e.value.wanted) == ("trainer.constraint_fraction", "0.5",
                                                          "0.25")
    for argv, message in ((["--constraint-fraction", "0.3"], "needs --constraint-split"),
                          (["--constraint-split", "holdout", "--constraint-fraction", "1"],
                           "must be in (0, 1), got 1.0")):
        with pytest.raises(SystemExit):
            rep.main(argv)
        assert message in capsys.readouterr().err


def test_protected_groups_give_unconstrained_violations_of_the_papers_sign(rep):
    """Table 4's protected groups: in the committed results UncError's test violation
    F_other − F_prot − 0.02 has the sign of the paper's on every data set (Crime with
    protected = black 'low'; with 'high' it was −0.20 against the paper's +0.19)."""
    import json

    results = json.loads((ROOT / "benchmarks" / "results" / "reproduce_000.json").read_text())
    assert results["config"]["data"]["crime"]["protected_group"] == "low"
    for ds, cols in results["tables"]["table4"].items():
        values = [v[2] for v in cols["UncError"]]
        assert values and all(v * rep.PAPER_T4[ds]["UncError"][1] > 0 for v in values), (
            ds, values)


def test_selection_and_arithmetic(rep):
    def run(obj, g):
        return {"solutions": {"stochastic": {"validation": {"objective": obj, "c": g}}}}
    runs = [run(0.1, 0.05), run(0.3, -0.01), run(0.2, 0.0)]
    best = rep.select(runs, "stochastic", lambda m: m["objective"], lambda m: m["c"])
    assert best is runs[2]                      # feasible first, then the lowest objective
    # TFCO's rank rule (the authors' grid choice): objective ranks A1 C2 D3 B4, violation
    # ranks B1 D1 A3 C4; the larger rank is smallest (3) for A and D, the objective breaks
    # the tie: the slightly infeasible A, where feasible-first takes D
    runs = [run(0.1, 0.01), run(0.5, 0.0), run(0.3, 0.2), run(0.4, 0.0)]
    pick = {rule: rep.select(runs, "stochastic", lambda m: m["objective"], lambda m: m["c"],
                             rule) for rule in ("feasible_first", "rank")}
    assert pick["feasible_first"] is runs[3] and pick["rank"] is runs[0]
    m, se, n = rep.mean_se([1.0, 2.0, 3.0])
    assert (m, n) == (2.0, 3) and se == pytest.approx(1 / 3 ** 0.5)
    groups = {"overall": {"fmeasure": 0.6}, "sex=Female": {"fmeasure": 0.5},
              "sex=Male": {"fmeasure": 0.7}}
    assert rep.f1_violation(groups, "sex", "Female") == pytest.approx(0.18)
    assert rep.kld_sum({"overall": {"kld": 0.0}, "a": {"kld": 0.1},
                        "b": {"kld": 0.2}}) == pytest.approx(0.3)


def test_a_saved_cell_run_with_another_protocol_is_refused(rep, tmp_path):
    """Cell keys name neither the steps, the selection split nor the θ optimizer: a rerun
    asking for another one must not report the saved cells as its own protocol."""
    import json

    cell = {"kind": "kld", "dataset": "law", "split": 0, "algorithm": "algorithm2",
            "theta_lr": 0.1, "lambda_lr": 1.0}
    args = {"cells_dir": str(tmp_path), "steps": 1500, "selection": "train",
            "optimizer": "sgd"}
    assert rep.load_cell(args, cell) is None
    saved = {"cell": cell, "overrides": rep.overrides(cell, 1500, 0.2, "train", "sgd")}
    (tmp_path / f"{rep.cell_key(cell)}.json").write_text(json.dumps(saved))
    assert rep.load_cell(args, cell)["cell"] == cell
    def refused(changes: dict, key: str, ran: str, wanted: str) -> None:
        with pytest.raises(rep.ProtocolMismatch) as e:
            rep.load_cell({**args, **changes}, cell)
        assert (e.value.key, e.value.ran, e.value.wanted) == (key, ran, wanted)
        assert rep.cell_key(cell) in e.value.where

    refused({"steps": 5000}, "trainer.steps", "1500", "5000")
    refused({"selection": "validation"}, "trainer.selection_split", "train", "validation")
    refused({"optimizer": "adam"}, "optimizer", "sgd", "adam")
    # a cell run with plain OGD for λ is not a cell of an Adam-λ protocol
    refused({"lambda_optimizer": "adam"}, "algorithm.multiplier_optimizer", "null", "adam")
    # nor a cell run without weight decay one of a weight-decay protocol
    refused({"weight_decay": 0.1}, "optimizer.weight_decay", "0.0", "0.1")
    # nor a cell of the paper's game one of the two-dataset game's
    refused({"constraint_split": "validation"}, "trainer.constraint_split", "train",
            "validation")
    # nor a holdout cell of one share a cell of another
    holdout = {**args, "constraint_split": "holdout"}
    (tmp_path / f"{rep.cell_key(cell)}.json").write_text(json.dumps(
        {"cell": cell, "overrides": rep.protocol_overrides(cell, holdout, 0.2)}))
    assert rep.load_cell({**holdout, "constraint_fraction": 0.5}, cell) is not None
    refused({**holdout, "constraint_fraction": 0.25}, "trainer.constraint_fraction", "0.5",
            "0.25")
    (tmp_path / f"{rep.cell_key(cell)}.json").write_text(json.dumps(saved))
    unc = {"kind": "unc", "dataset": "law", "split": 0, "theta_lr": 0.1}   # no λ to step
    (tmp_path / f"{rep.cell_key(unc)}.json").write_text(json.dumps(
        {"cell": unc, "overrides": rep.overrides(unc, 1500, None, "train", "sgd")}))
    assert rep.load_cell({**args, "lambda_optimizer": "adam"}, unc) is not None
    assert rep.load_cell({**args, "constraint_split": "validation"}, unc) is not None
    baseline = {"kind": "baselines", "dataset": "law", "split": 0}   # no steps: no check
    (tmp_path / f"{rep.cell_key(baseline)}.json").write_text(json.dumps({"cell": baseline}))
    assert rep.load_cell({**args, "steps": 5000}, baseline) is not None
    # a data split other than the recipe's: the engine cell and the baselines are refused
    refused({"data_split": "random"}, "data.split", "default", "random")
    with pytest.raises(rep.ProtocolMismatch) as e:
        rep.load_cell({**args, "data_split": "random"}, baseline)
    assert (e.value.key, e.value.ran, e.value.wanted) == ("data_split", "default", "random")
    (tmp_path / f"{rep.cell_key(baseline)}.json").write_text(json.dumps(
        {"cell": baseline, "data_split": "random"}))
    assert rep.load_cell({**args, "data_split": "random"}, baseline) is not None


def test_a_cell_saved_before_the_pins_reads_as_the_default_protocol(rep):
    """Cells saved before every setting was pinned lack the overrides then left at their
    defaults: they are cells of the default protocol (and still refused by any other)."""
    cell = {"kind": "f1_lp", "dataset": "adult", "split": 0, "algorithm": "algorithm3",
            "theta_lr": 0.1, "lambda_lr": 1.0}
    legacy = {"cell": cell, "overrides": [
        "data=adult", "data.protected=sex", "data.paper='000'", "+data.seed=0", "seed=0",
        "model=linear", "optimizer=adam", "optimizer.lr=0.1", "trainer.steps=200",
        "trainer.selection_split=train", "problem=fmeasure_parity", "algorithm=algorithm3",
        "problem.protected_group=Female", "trainer.stochastic=shrunk",
        "algorithm.multiplier_lr=1.0"]}
    args = {"steps": 200, "selection": "train", "optimizer": "adam"}
    rep.check_cell_protocol(legacy, args, "legacy")
    for changes, key in (({"data_split": "random"}, "data.split"),
                         ({"weight_decay": 0.1}, "optimizer.weight_decay"),
                         ({"lambda_optimizer": "adam"}, "algorithm.multiplier_optimizer"),
                         ({"constraint_split": "holdout"}, "trainer.constraint_split")):
        with pytest.raises(rep.ProtocolMismatch) as e:
            rep.check_cell_protocol(legacy, {**args, **changes}, "legacy")
        assert e.value.key == key


def test_a_table3_cell_run_with_another_bound_is_refused(rep):
    """Table 3's runs share one bound (1.1 × the chosen UncError's training error): a cell run
    before the UncError choice changed must not be tabulated with the new one."""
    cell = {"kind": "kld", "dataset": "law", "split": 0, "algorithm": "algorithm2",
            "theta_lr": 0.1, "lambda_lr": 1.0}
    rep.check_cell_bound({"cell": cell, "unc_error": 0.2}, 0.2)
    rep.check_cell_bound(None, 0.2)                                  # not run yet
    rep.check_cell_bound({"cell": {"kind": "unc"}, "unc_error": None}, 0.2)
    with pytest.raises(ValueError, match="kld_law_s0_algorithm2_th0.1_la1 was run with"):
        rep.check_cell_bound({"cell": cell, "unc_error": 0.21}, 0.2)


def _fake_cells(rep, tmp_path, args):
    """Minimal saved cells for ``collect``: every engine cell's metrics are functions of its
    learning rates, so the expected choices can be worked out by hand."""
    def groups(ds, kld_each, f_prot, f_other):
        attr, prot = rep.PROTECTED[ds]
        return {"overall": {"kld": 0.0, "fmeasure": (f_prot + f_other) / 2, "error": 0.2},
                f"{attr}={prot}": {"kld": kld_each, "fmeasure": f_prot},
                f"{attr}=other": {"kld": kld_each, "fmeasure": f_other}}

    records = {}

    def save(cell, data):
        if "theta_lr" in cell:     # engine cells record their overrides; baselines none
            data["overrides"] = rep.overrides(cell, args["steps"], None, args["selection"],
                                              args["optimizer"])
        records[rep.cell_key(cell)] = {"cell": cell, **data}

    unc_cells, rest = rep.build_cells(args)
    for c in unc_cells:            # θ 1 has the lower validation error: UncError's choice
        m = {"error": 0.2, "groups": groups(c["dataset"], 0.05, 0.5, 0.7)}
        save(c, {"unc_error": None, "solutions": {"best_iterate": {
            "train": {"error": 0.1}, "validation": {"error": 0.3 - 0.1 * c["theta_lr"]},
            "test": m}}})
    for c in rest:
        t, la = c.get("theta_lr"), c.get("lambda_lr") or 0.0
        if c["kind"] == "baselines":
            g = {"test": {"groups": groups(c["dataset"], 0.0, 0.6, 0.6)}}
            save(c, {"unc_error": 0.1, "PostShift": g, "COCO": g, "UncF1": g})
            continue
        # θ 0.1 is infeasible on validation, θ 1 feasible: θ 1 is chosen in every grid;
        # the test values name the run (t + la) and the solution (stochastic: +0.5).
        sols = {}
        for sol, shift in (("stochastic", 0.5), ("best_iterate", 0.0)):
            gap = 0.01 if t == 0.1 else -0.01
            sols[sol] = {
                "train": {"constraints": {"f1_parity": {"value": -0.02 * t}}},
                "validation": {"objective": 0.1 * la, "error": 0.2,
                               "constraints": {"error_bound": {"value": gap},
                                               "f1_parity": {"value": gap}}},
                "test": {"objective": t + la + shift, "error": 0.2,
                         "constraints": {"error_bound": {"value": 0.0},
                                         "f1_parity": {"value": t + la + shift}}}}
        save(c, {"unc_error": 0.1 if c["kind"] != "ablation" else None, "solutions": sols})
    # UncError's cells in one archive, the rest in a later one (as a run writes them)
    unc_keys = {rep.cell_key(c) for c in unc_cells}
    for part in (unc_keys, set(records) - unc_keys):
        for key in part:
            rep.write_pending(tmp_path, key, records[key])
        rep.CellStore(tmp_path).pack()


def test_collect_takes_the_lp_run_for_both_paper_columns(rep, tmp_path):
    """The paper's Stochastic column is the LP-mixture run chosen by its stochastic model on
    validation and the Deterministic column that same run's best iterate (the authors'
    experiments.py); the uniform mixture gets its own table; every data set's ablation row is
    filled."""
    args = {"datasets": ["compas", "crime"], "splits": 1, "theta_lrs": [0.1, 1.0],
            "lambda_lrs": [0.1, 1.0], "no_ablation": False, "ablation_splits": 1,
            "steps": 100, "selection": "train", "optimizer": "adam",
            "cells_dir": str(tmp_path)}
    _fake_cells(rep, tmp_path, args)
    per = rep.collect(args)
    for ds in args["datasets"]:
        t3, t4 = per["table3"][ds], per["table4"][ds]
        # θ 1 (feasible), then the lowest validation objective: λ 0.1 → test 1.1 (+0.5)
        assert t3["Stochastic"] == [(0, pytest.approx(1.6), pytest.approx(1.0), 1.0, 0.1)]
        assert t3["Deterministic"] == [(0, pytest.approx(1.1), pytest.approx(1.0), 1.0, 0.1)]
        assert t4["Stochastic"][0][1:3] == (pytest.approx(1 - 1.6), pytest.approx(1.6))
        assert t4["Deterministic"][0][1:3] == (pytest.approx(1 - 1.1), pytest.approx(1.1))
        assert per["table3_uniform"][ds]["Stochastic"][0][1] == pytest.approx(1.6)
        assert t3["UncError"] == [(0, pytest.approx(0.1), 1.0)]
        values = per["ablation"][ds]["values"]
        assert set(values) == {column[0] for column in rep.ABLATION}
        assert all(len(v) == 2 for v in values.values()), values
        # the chosen run's violations, then the grid's lowest test violation (θ 0.1, λ 0.1)
        assert per["table4_diagnostics"][ds] == [
            (0, pytest.approx(-0.02), pytest.approx(-0.01), pytest.approx(1.6),
             pytest.approx(0.7), 0.1, 0.1)]
    figures, _, goals, md = rep.summarise(per, args)
    assert "Table 3, stochastic output as the uniform mixture" in "\n".join(md)
    assert figures["table4_diagnostics.crime.oracle"] == pytest.approx(0.7)
    assert goals["t3_stochastic_error_ratio[crime]"]["value"] == pytest.approx(1.0)


def test_kinds_restrict_the_cells_run_but_never_uncerror(rep):
    args = {"datasets": ["adult"], "splits": 2, "theta_lrs": [0.1, 1.0],
            "lambda_lrs": [0.1], "no_ablation": False, "ablation_splits": 1,
            "kinds": ["f1_lp"]}
    unc, rest = rep.build_cells(args)
    assert len(unc) == 4 and {c["kind"] for c in unc} == {"unc"}
    assert {c["kind"] for c in rest} == {"f1_lp"} and len(rest) == 2 * 2 * 1
    unc_all, rest_all = rep.build_cells({**args, "kinds": None})
    assert unc_all == unc and {c["kind"] for c in rest_all} == {*rep.RUN_KINDS}


# Every kind of engine cell, and every CLI variant of the protocol that changes its overrides.
PINNED_CELLS = [
    ({"kind": "unc", "dataset": "adult", "split": 1, "theta_lr": 0.1}, {}),
    ({"kind": "kld", "dataset": "compas", "split": 0, "algorithm": "algorithm2",
      "theta_lr": 0.1, "lambda_lr": 1.0}, {}),
    ({"kind": "kld_lp", "dataset": "law", "split": 0, "algorithm": "algorithm2",
      "theta_lr": 1.0, "lambda_lr": 0.1}, {"data_split": "random"}),
    ({"kind": "f1", "dataset": "crime", "split": 2, "algorithm": "algorithm3",
      "theta_lr": 0.1, "lambda_lr": 0.01}, {"lambda_optimizer": "adam", "weight_decay": 0.1}),
    ({"kind": "f1_lp", "dataset": "adult", "split": 0, "algorithm": "algorithm3",
      "theta_lr": 0.1, "lambda_lr": 1.0}, {"constraint_split": "holdout",
                                           "constraint_fraction": 0.25}),
    ({"kind": "ablation", "dataset": "crime", "split": 0, "algorithm": "spade",
      "surrogate": "sigmoid", "theta_lr": 0.1, "lambda_lr": 1.0}, {}),
    ({"kind": "ablation", "dataset": "compas", "split": 0, "algorithm": "nemsis",
      "surrogate": "sigmoid", "theta_lr": 1.0, "lambda_lr": None}, {"lambda_optimizer": "adam"}),
]
# what no default may decide without the script saying so; these cannot change a number
NOT_PINNED = {"run_dir",                 # the engine's run() is given its run directory
              "problem.description",     # prose in the run's report
              "problem.data_sets",       # documentation: which data the problem is meant for
              "trainer.bootstrap",       # resamples of the reported intervals, after training
              "families",                # modules of one's own families: none here
              "overwrite"}               # run_cell sets it: a cell reruns into its own dir


def _compose(rep, config_dir: Path, ov: list[str]) -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import fairgames.train.config  # noqa: F401

    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        return OmegaConf.to_container(compose("train", overrides=ov))


def _leaves(tree: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):        # an empty one has nothing a default could set
            out.update(_leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _protocol(changes: dict) -> dict:
    return {"steps": 300, "selection": "train", "optimizer": "adam", **changes}


@pytest.mark.parametrize(("cell", "changes"), PINNED_CELLS,
                         ids=[c["kind"] + "_" + c.get("algorithm", "") for c, _ in PINNED_CELLS])
def test_every_setting_of_an_engine_cell_is_an_override(rep, cell, changes):
    """Every key of a cell's composed config is set by one of its overrides, so no default
    of configs/ or of the schema (fairgames/train/config.py) decides a number of the tables;
    a key added to either later fails here until the script pins it."""
    from omegaconf import OmegaConf

    from fairgames.train import validate

    ov = rep.protocol_overrides(cell, _protocol(changes), 0.25)
    set_keys = {o.split("=", 1)[0].lstrip("+") for o in ov}
    cfg = _compose(rep, ROOT / "configs", ov)
    validate(OmegaConf.create(cfg))
    unpinned = sorted(k for k in _leaves(cfg) if k not in set_keys and k not in NOT_PINNED)
    assert unpinned == []
    assert len(set_keys) == len(ov)                      # each setting said once
    for group in ("data", "problem", "model", "optimizer", "algorithm"):
        assert any(o.startswith(f"{group}=") for o in ov), group


def _perturbed(value):
    """Another value of the same kind (what a changed default might be)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value * 3 + 1
    if isinstance(value, str):
        return value + "_changed"
    if value is None:
        return 7
    if isinstance(value, list):
        return [*value, 5]
    return {k: _perturbed(v) for k, v in value.items()}


def test_changing_every_default_of_configs_moves_no_cell(rep, tmp_path):
    """A copy of configs/ with every value of every group file (and train.yaml's seed) changed
    composes every kind of cell to the same config as configs/ itself."""
    import shutil

    import yaml

    patched = tmp_path / "configs"
    shutil.copytree(ROOT / "configs", patched)
    changed = 0
    for path in patched.rglob("*.yaml"):
        doc = yaml.safe_load(path.read_text())
        keep = {"defaults", "hydra", "run_dir"}        # train.yaml's structure, not values
        new = {k: (v if k in keep else _perturbed(v)) for k, v in doc.items()}
        changed += sum(new[k] != doc[k] for k in doc)
        path.write_text(yaml.safe_dump(new, allow_unicode=True))
    assert changed > 100
    for cell, changes in PINNED_CELLS:
        ov = rep.protocol_overrides(cell, _protocol(changes), 0.25)
        ours, theirs = _compose(rep, ROOT / "configs", ov), _compose(rep, patched, ov)
        for key in NOT_PINNED:
            for tree in (ours, theirs):
                node, *path = key.split(".")
                (tree[node] if path else tree).pop(path[-1] if path else node)
        assert theirs == ours, rep.cell_key(cell)


def test_a_rerun_skips_archived_cells_and_archives_only_its_own(rep, tmp_path, monkeypatch):
    """Resumable: cells in any archive are not run again; each run's new cells land in one
    new archive, and the earlier archive keeps its bytes."""
    ran = []

    def worker(job):                   # the cell's record, as _worker saves it
        cell, args, _ = job
        ran.append(rep.cell_key(cell))
        rep.write_pending(args["cells_dir"], rep.cell_key(cell), {"cell": cell, "solutions": {
            "best_iterate": {s: {"error": cell["theta_lr"]} for s in ("train", "validation")}}})
        return rep.cell_key(cell), "done"

    monkeypatch.setattr(rep, "_worker", worker)
    args = {"datasets": ["law"], "splits": 1, "theta_lrs": [0.1, 1.0], "cells_dir":
            str(tmp_path / "cells"), "steps": 10}
    unc = [{"kind": "unc", "dataset": "law", "split": 0, "theta_lr": t} for t in (0.1, 1.0)]
    rep.run_all(unc, [], args, 1)
    (first,) = rep.store_of(args).archives()
    before = first.read_bytes()
    assert sorted(ran) == ["unc_law_s0_th0.1", "unc_law_s0_th1"]
    more = [*unc, {"kind": "unc", "dataset": "law", "split": 0, "theta_lr": 0.01}]
    rep.run_all(more, [], {**args, "theta_lrs": [0.1, 1.0, 0.01]}, 1)
    assert ran[2:] == ["unc_law_s0_th0.01"]
    first_now, second = rep.CellStore(args["cells_dir"]).archives()
    assert first_now == first and first.read_bytes() == before
    from benchmarks.harness.cells import read_archive

    assert set(read_archive(second)) == {"unc_law_s0_th0.01"}
    assert not list((tmp_path / "cells" / "pending").glob("*"))
    assert rep.unc_choice({**args, "theta_lrs": [0.1, 1.0, 0.01]}, "law", 0)[
        "cell"]["theta_lr"] == 0.01


# Committed cells of every kind (main results: 1500 steps, Adam for θ, OGD for λ, snapshots
# compared on train), re-run with today's code.
RERUN = ("unc_law_s3_th0.1", "baselines_crime_s1", "kld_compas_s0_algorithm2_th0.1_la0.1",
         "kld_lp_crime_s2_algorithm2_th1_la0.01", "f1_compas_s1_algorithm3_th0.01_la1",
         "f1_lp_crime_s0_algorithm3_th0.1_la0.1", "ablation_crime_s0_algorithm2_th0.1_la1",
         "ablation_compas_s0_algorithm2_sigmoid_th1_la0.1",
         "ablation_crime_s0_spade_sigmoid_th0.1_la0.1", "ablation_compas_s0_nemsis_sigmoid_th0.01")
# what a run records besides when, where and how long it took
COMPARED = ("solutions", "best_iterate", "stochastic", "unconstrained", "refused", "PostShift",
            "UncF1", "UncF1_threshold", "COCO", "COCO_grid", "bound")


# Cells that today's code does not reproduce: the committed main results were run before 20
# later commits to fairgames/ (the code of a2e96d6, before the cells became archives, gives
# the same differences): other best iterates and snapshots; Crime's plug-in F1 threshold moves
# by 2e-6. Strict: a rerun of the tables that makes them pass shows here.
STALE = {k for k in RERUN if k not in ("ablation_compas_s0_algorithm2_sigmoid_th1_la0.1",)}


@pytest.mark.slow
@pytest.mark.parametrize("key", [pytest.param(k, marks=pytest.mark.xfail(
    strict=True, reason="committed before later fairgames/ changes")) if k in STALE else k
                                 for k in RERUN])
def test_a_committed_cell_rerun_equals_its_record(rep, key, tmp_path):
    """The committed tables are what today's code computes: a cell re-run (one torch thread,
    as the script's workers run them) equals its archived record exactly."""
    import json

    import torch

    results = ROOT / "benchmarks" / "results"
    config = json.loads((results / "reproduce_000.json").read_text())["config"]
    saved = rep.CellStore(results / "reproduce_000.cells").get(key)
    cell = saved["cell"]
    assert rep.cell_key(cell) == key
    args = {"steps": config["steps"], "selection": config["selection_split"],
            "optimizer": config["theta_optimizer"].split(",")[0],
            "lambda_optimizer": config["lambda_optimizer"], "work_dir": str(tmp_path)}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if cell["kind"] == "baselines":
            again = rep.run_baseline_cell(cell, saved["unc_error"])
        else:
            rep.check_cell_protocol(saved, args, key)       # the protocol it was run with
            again = rep.run_engine_cell(cell, args, saved["unc_error"])
    finally:
        torch.set_num_threads(threads)
    again = json.loads(json.dumps(again))                   # as stored: tuples are lists
    compared = [k for k in COMPARED if k in saved]
    assert compared and all(k in again for k in compared)
    for k in compared:
        assert_same_record(again[k], saved[k], k)


def assert_same_record(again: object, saved: object, path: str) -> None:
    """``again`` holds every field of ``saved`` with the same value: numbers to the last
    few bits (1e-12 relative: an operation reordered in a metric moves a ratio by an ulp),
    everything else exactly; fields added to the records since (``label_kind``) are allowed."""
    if isinstance(saved, dict):
        assert isinstance(again, dict), path
        for k, v in saved.items():
            assert k in again, f"{path}/{k} missing"
            assert_same_record(again[k], v, f"{path}/{k}")
    elif isinstance(saved, list):
        assert isinstance(again, list) and len(again) == len(saved), path
        for i, (a, b) in enumerate(zip(again, saved, strict=True)):
            assert_same_record(a, b, f"{path}[{i}]")
    elif isinstance(saved, float) and isinstance(again, float):
        assert math.isclose(again, saved, rel_tol=1e-12, abs_tol=1e-15), (path, again, saved)
    else:
        assert again == saved, (path, again, saved)


def test_records_compare_to_the_last_bits_and_allow_added_fields():
    """The rerun comparison's own rule, on hand-made records."""
    saved = {"a": [0.1, {"b": 1}], "c": "x"}
    assert_same_record({"a": [0.1 + 1e-17, {"b": 1}], "c": "x", "new": 2}, saved, "r")
    for wrong in ({"a": [0.1 + 1e-9, {"b": 1}], "c": "x"}, {"a": [0.1, {"b": 2}], "c": "x"},
                  {"a": [0.1], "c": "x"}, {"a": [0.1, {"b": 1}]}):
        with pytest.raises(AssertionError):
            assert_same_record(wrong, saved, "r")


def test_cells_on_a_hydra_launcher_equal_cells_run_inline(rep, tmp_path):
    """The cells run as one Hydra multirun (fairgames.train.sweeps.launch) give the records that
    running them in this process gives, and are saved for a rerun to skip (resumable)."""
    import torch

    cells = [{"kind": "unc", "dataset": "law", "split": 0, "theta_lr": t} for t in (0.1, 1.0)]
    records = {}
    threads = torch.get_num_threads()
    try:
        for launcher in ("inline", "basic"):
            args = {"datasets": ["law"], "splits": 1, "theta_lrs": [0.1, 1.0], "steps": 10,
                    "cells_dir": str(tmp_path / launcher / "cells"),
                    "work_dir": str(tmp_path / launcher / "runs")}
            rep.run_all(cells, [], args, 2, launcher)
            records[launcher] = {rep.cell_key(c): rep.load_cell(args, c) for c in cells}
    finally:
        torch.set_num_threads(threads)          # the inline worker sets one thread
    for key, inline in records["inline"].items():
        launched = records["basic"][key]
        assert launched["solutions"] == inline["solutions"], key
        assert launched["overrides"] == inline["overrides"]
    assert list((tmp_path / "basic" / "runs" / "launch").glob("*/jobs/1/return.json"))
