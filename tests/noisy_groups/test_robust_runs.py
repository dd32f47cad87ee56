"""Noisy protected groups on the command line (paper 004): data.noise, robust=dro, the robust
block of results.json, and the errors for bad settings."""

from __future__ import annotations

import pytest
import torch

from fairgames.data import (
    DataError,
    DatasetSplits,
    estimate_group_noise,
    make_synthetic,
    noisy_splits,
)
from fairgames.noisy_groups.robust import check_splits, estimate_gamma
from fairgames.noisy_groups.tv_ball import robust_values
from fairgames.rates import group, true_positive_rate
from fairgames.train import ConfigError, run
from fairgames.train.data import load_splits
from fairgames.train.loop.engine import Engine, GameData
from fairgames.train.loop.logger import clean_tag
from fairgames.train.results.report import validate_results

# the bound test's data: balanced groups, similar base rates, little noise, so that a model
# can meet the exact robust constraint (TPR_j may lose ≈ γ_j / P(y=1 | j) to the adversary)
EASY = ["data.noise=0.05", "data.group_proportions=[0.5,0.5]", "data.group_shift=0.5",
        "problem=equal_opportunity", "problem.tolerance=0.15"]


@pytest.fixture(scope="module")
def dro_run(train_run):
    return train_run("dro", *EASY, "robust=dro", "robust.gamma=tv")


def test_noise_flips_the_whole_data_set_once_and_keeps_the_true_groups():
    splits = load_splits({"name": "synthetic", "protected": "group", "n": 1000,
                          "noise": 0.3, "noise_seed": 4}, seed=0)
    clean = load_splits({"name": "synthetic", "protected": "group", "n": 1000}, seed=0)
    flipped = 0
    for noisy, ref in zip(splits, clean, strict=True):
        assert torch.equal(noisy.groups["group_true"], ref.groups["group"])
        assert torch.equal(noisy.features, ref.features)          # the split is unchanged
        flipped += int((noisy.groups["group"] != ref.groups["group"]).sum())
    assert flipped == 300                                          # floor(0.3 · N) of all rows
    assert splits.metadata["noise"]["true_attribute"] == "group_true"


def test_dro_run_reports_true_noisy_and_robust_values_per_split(dro_run):
    out = dro_run.results
    validate_results(out)
    block = out["robust"]
    assert block["method"] == "dro" and block["gamma_source"] == "tv"
    train = dro_run.engine.train
    assert block["gamma"] == pytest.approx(dict(zip(
        train.group_names["group"], estimate_gamma(train, "group", "tv"), strict=True)))
    assert set(block["splits"]) == {"train", "validation", "test"}
    for split in block["splits"].values():
        assert set(split["robust_values"]) == set(out["solutions"]["recommended"]["train"]
                                                  ["constraints"])
    # the adversary moved, and stayed in its ball
    dro = dro_run.engine.copt.player("dro")
    assert dro.ascent == "unscaled" and dro._rows is not None     # the config's default
    assert (dro.distance() > 0).all()
    assert (dro.distance() <= torch.tensor(dro.gamma) + 1e-6).all()
    assert "dro/distance/0" in dro_run.engine.history[-1]["players"]


def test_robust_bound_dro_model_meeting_its_robust_constraint_meets_the_true_one(dro_run):
    # γ_j >= the empirical TV distance on train (robust.gamma=tv), so the true group's
    # distribution lies in each ball: Theorem 1 on the training rows
    train = dro_run.results["robust"]["splits"]["train"]
    assert train["robust_max"] <= 0                  # the DRO model meets its robust constraint
    assert train["true_max_violation"] <= 0


def test_robust_value_bounds_the_true_value_for_any_model():
    splits = noisy_splits(make_synthetic(n=2000, seed=3), "group", 0.2, seed=1)
    train = splits.train
    gamma = estimate_gamma(train, "group", "tv")
    cons = {f"eo{v}": (true_positive_rate(group("group", v)) >= true_positive_rate() - 0.05)
            for v in train.group_names["group"]}
    names = train.group_names
    g = torch.Generator().manual_seed(0)
    for _ in range(10):
        scores = train.features @ torch.randn(train.num_features, generator=g)
        robust = robust_values(cons, "group", gamma, scores, train.labels, train.groups, names)
        truth = robust_values(cons, "group", [0.0, 0.0], scores, train.labels,
                              {**train.groups, "group": train.groups["group_true"]}, names)
        noisy = robust_values(cons, "group", [0.0, 0.0], scores, train.labels, train.groups,
                              names)
        for n in cons:
            assert robust[n] >= truth[n] - 1e-12 and robust[n] >= noisy[n] - 1e-12


def test_a_stopped_minibatch_dro_run_resumes_bit_for_bit(train_run, tmp_path, same_run):
    # minibatches: the adversary's p̃ moves only on the rows each batch's ids name
    common = [*EASY, "robust=dro", "robust.gamma=tv", "trainer.batch_size=256",
              "trainer.steps=60", "trainer.checkpoint_every=20", "trainer.bootstrap=0"]
    full = train_run("dro_full", *common)
    stopped = train_run("dro_stopped", *common, "trainer.stop_after=30", run_dir=tmp_path)
    assert stopped.stopped and stopped.engine.step == 30
    resumed = train_run("dro_resumed", *common, "trainer.resume=true", run_dir=tmp_path)
    same_run(resumed, full)
    assert torch.equal(resumed.engine.copt.player("dro").p, full.engine.copt.player("dro").p)
    assert resumed.results["robust"] == full.results["robust"]


def test_robust_none_without_noise_adds_nothing(unconstrained_run):
    assert "robust" not in unconstrained_run.results
    assert unconstrained_run.results["config"]["robust"]["name"] == "none"


def test_engine_fills_example_ids_for_full_and_minibatches():
    train = make_synthetic(n=300, d=3, seed=0).train
    from fairgames.game import ConstrainedOptimizer, Problem
    from fairgames.rates import error_rate

    for size in (None, 64):
        model = torch.nn.Linear(3, 1)
        copt = ConstrainedOptimizer(Problem(error_rate()),
                                    torch.optim.SGD(model.parameters(), lr=0.1))
        from fairgames.train.loop.engine import BatchSettings
        engine = Engine(model, copt, GameData(train, "group"), steps=2,
                        batches=BatchSettings(size=size))
        engine.train_step()
        _, fields = engine._last
        ids = fields["example_ids"]
        assert len(ids) == (len(train) if size is None else size)
        assert torch.equal(fields["labels"], train.labels[ids])     # the rows they name
        if size is None:
            assert torch.equal(ids, torch.arange(len(train)))


@pytest.mark.parametrize("override,message", [
    ("robust.name=bogus", "robust.name='bogus'"),
    ("robust.gamma=1.5", "robust.gamma=1.5"),
    ("robust.optimizer=rmsprop", "robust.optimizer='rmsprop'"),
    ("robust.steps=0", "robust.steps=0"),
    ("robust.ascent=lambda", "robust.ascent='lambda'"),
])
def test_bad_robust_settings_are_config_errors(compose_cfg, override, message):
    cfg = compose_cfg("data=synthetic", "data.noise=0.1", "robust=dro", override)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace(".", r"\.")):
        run(cfg)


def test_dro_with_a_heldout_constraint_split_is_refused(compose_cfg):
    cfg = compose_cfg("data=synthetic", "data.noise=0.1", "robust=dro",
                      "trainer.constraint_split=validation")
    with pytest.raises(ConfigError, match="robust=dro reweights the training rows by id"):
        run(cfg)


@pytest.mark.parametrize("noise", [1.5, -0.1])
def test_noise_outside_the_unit_interval_is_a_clear_error(noise):
    with pytest.raises((ConfigError, DataError), match=r"noise must be .* in \[0, 1\]"):
        load_splits({"name": "synthetic", "protected": "group", "noise": noise}, seed=0)


def test_gamma_estimate_needs_the_true_groups_and_one_gamma_per_group(compose_cfg):
    with pytest.raises(ConfigError, match="needs the true groups of the training rows"):
        run(compose_cfg("data=synthetic", "trainer=smoke", "robust=dro"))
    with pytest.raises(ConfigError, match="robust.gamma has 3 values but 'group' has 2"):
        run(compose_cfg("data=synthetic", "trainer=smoke", "robust=dro",
                        "robust.gamma=[0.1,0.1,0.1]"))


def test_a_noisy_group_absent_from_a_split_is_a_clear_error():
    splits = make_synthetic(n=300, seed=0)
    test = splits.test.subset(splits.test.groups["group"] == 0)
    broken = DatasetSplits(splits.train, splits.validation, test)
    with pytest.raises(ValueError, match=r"noisy group\(s\) \['1'\] of 'group' have no row "
                                         "in the test split"):
        check_splits(broken, "group")


# soft assignments: noise 0.3 on the FAST data, where naive training breaks the true groups
SA = ["data.noise=0.3", "problem=equal_opportunity", "trainer.steps=200"]


@pytest.fixture(scope="module")
def sa_runs(train_run):
    return (train_run("sa", *SA, "robust=soft_assignments"),
            train_run("sa_naive", *SA))


def test_soft_assignments_run_reports_the_lp_worst_case_beside_naive_and_true(sa_runs):
    sa, naive = sa_runs
    out = sa.results
    validate_results(out)
    block = out["robust"]
    assert block["method"] == "soft_assignments"
    train = sa.engine.train
    b = estimate_group_noise(train.groups["group_true"], train.groups["group"],
                             n_groups=2).p_true_given_noisy
    names = train.group_names["group"]
    for kk, k in enumerate(names):
        assert block["p_true_given_noisy"][k] == pytest.approx(
            {j: float(b[jj, kk]) for jj, j in enumerate(names)})
    player = sa.engine.copt.player("soft_assignments")
    assert player.timing == "before_theta" and player.steps == 5
    assert torch.equal(player.b.double().cpu(), b.float().double())
    constraints = set(out["solutions"]["recommended"]["train"]["constraints"])
    for split in block["splits"].values():
        assert set(split["soft_values"]) == constraints
        assert split["soft_max"] == max(split["soft_values"].values())
        # the worst case over 𝒲 is at least the true groups' value (the true W is in 𝒲 of
        # the training rows' own statistics; on other splits up to sampling noise)
    tr = block["splits"]["train"]
    assert tr["soft_max"] >= tr["true_max_violation"] - 1e-9
    # the naive run (same data and settings) reports the same columns, for comparison; the
    # SA model breaks the true-group constraints on train less than the naive one
    naive_tr = naive.results["robust"]["splits"]["train"]
    assert naive.results["robust"]["method"] == "none" and "soft_max" in naive_tr
    assert tr["true_max_violation"] < naive_tr["true_max_violation"] - 0.03, (tr, naive_tr)


def test_tensorboard_shows_true_noisy_and_robust_curves_lambda_and_w(sa_runs):
    """Read back from the event file: the whole-split curves at every log step, λ, and W;
    the last true-group value is the final model's, computed directly from the masks."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sa, naive = sa_runs
    events = EventAccumulator(str(sa.run_dir), size_guidance={"scalars": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    names = list(sa.results["solutions"]["recommended"]["train"]["constraints"])
    want = {"robust/true/max_violation", "robust/noisy/max_violation", "robust/tv/max",
            "robust/sa/max", "soft_assignments/w/1/11/0"}
    want |= {f"robust/{kind}/{clean_tag(n)}" for kind in ("true", "tv", "sa") for n in names}
    want |= {t for t in tags if t.startswith("multiplier/")} or {"multiplier/<row>"}
    assert want <= tags, sorted(want - tags)
    steps = [e.step for e in events.Scalars("robust/true/max_violation")]
    assert steps == [h["step"] for h in sa.engine.history]           # every log, no other
    last = events.Scalars("robust/true/max_violation")[-1].value
    assert last == pytest.approx(max(_true_tpr_violation(sa.model, sa.engine.train, 0.05), 0),
                                 abs=1e-5)
    # the SA worst case (a value g) bounds the true violation max(g, 0) at every log step
    # (the true W is in 𝒲 of the training rows, whose noise model the LP uses)
    for sa_v, true_v in zip(events.Scalars("robust/sa/max"),
                            events.Scalars("robust/true/max_violation"), strict=True):
        assert max(sa_v.value, 0.0) >= true_v.value - 1e-5
    w = events.Scalars("soft_assignments/w/1/11/0")[-1].value
    player = sa.engine.copt.player("soft_assignments")
    assert w == pytest.approx(float(player.assignments()[1, 3, 0]), abs=1e-6)
    # a naive run on noisy data logs the same curves (it has the true groups), no W
    naive_events = EventAccumulator(str(naive.run_dir), size_guidance={"scalars": 0}).Reload()
    naive_tags = set(naive_events.Tags()["scalars"])
    assert not any(t.startswith("soft_assignments/") for t in naive_tags)
    truth = _true_tpr_violation(naive.model, naive.engine.train, 0.05)
    assert truth > 0.03                                   # naive breaks the true groups
    assert naive_events.Scalars("robust/true/max_violation")[-1].value == pytest.approx(
        truth, abs=1e-5)


def test_the_sa_worst_case_bounds_the_value_at_the_players_w():
    """The LP maximum over 𝒲 of a split's statistics ≥ the constraints at any W in that 𝒲,
    e.g. the player's W projected (many Dykstra rounds) onto the training rows' 𝒲."""
    from fairgames.game import Problem
    from fairgames.noisy_groups import SoftAssignmentPlayer
    from fairgames.noisy_groups.noise_model import soft_values
    from fairgames.noisy_groups.soft_groups import (
        affine_projector,
        cell_codes,
        cell_counts,
        cell_fractions,
        dykstra,
    )
    from fairgames.rates import error_rate

    splits = noisy_splits(make_synthetic(n=2000, seed=5), "group", 0.3, seed=2)
    train = splits.train
    cons = [(true_positive_rate(group("group", v)) >= true_positive_rate() - 0.05).named(v)
            for v in train.group_names["group"]]
    problem = Problem(error_rate(), cons)
    b = estimate_group_noise(train.groups["group_true"], train.groups["group"],
                             n_groups=2).p_true_given_noisy
    model = torch.nn.Linear(train.num_features, 1)
    player = SoftAssignmentPlayer("group", b, true_values=train.group_names["group"], lr=0.2)
    from fairgames.game import ConstrainedOptimizer
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1),
                                preset="lagrangian", players=[player])
    fields = {"labels": train.labels, "groups": {"group": train.groups["group"]},
              "group_values": train.group_names}
    for _ in range(10):
        copt.step_batch(model, train.features, **fields)
    with torch.no_grad():
        scores = model(train.features)[:, 0]
    counts = cell_counts(cell_codes(train.groups["group"], scores, train.labels), 2)
    w = dykstra(player.w.double(), affine_projector(cell_fractions(counts).double(), b), 500)
    player.w.copy_(w.float())
    at_w = player.robust_rows(counts).double()
    worst = soft_values(problem, scores, train, "group", b)
    for r, name in enumerate(train.group_names["group"]):
        assert worst[name] >= float(at_w[r]) - 1e-4, (worst, at_w)
    # one W serves both rows: it cannot be each row's maximiser, so one bound is strict
    assert any(worst[n] > float(at_w[r]) + 1e-3
               for r, n in enumerate(train.group_names["group"])), (worst, at_w)


def test_a_stopped_minibatch_sa_run_resumes_bit_for_bit(train_run, tmp_path, same_run):
    common = [*SA, "robust=soft_assignments", "trainer.batch_size=256", "trainer.steps=60",
              "trainer.checkpoint_every=20", "trainer.bootstrap=0"]
    full = train_run("sa_full", *common)
    stopped = train_run("sa_stopped", *common, "trainer.stop_after=30", run_dir=tmp_path)
    assert stopped.stopped and stopped.engine.step == 30
    resumed = train_run("sa_resumed", *common, "trainer.resume=true", run_dir=tmp_path)
    same_run(resumed, full)
    a = full.engine.copt.player("soft_assignments").state_dict()
    b = resumed.engine.copt.player("soft_assignments").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert resumed.results["robust"] == full.results["robust"]


@pytest.mark.parametrize("override,message", [
    ("robust.gamma=0.1", "robust.gamma=0.1: a key of robust=dro only"),
    ("robust.projection=authors", "robust.projection='authors': a key of robust=dro only"),
    ("robust.ascent=scaled", "robust.ascent='scaled': a key of robust=dro only"),
    ("robust.timing=sometimes", "robust.timing='sometimes'"),
    ("robust.projection_iterations=0", "robust.projection_iterations=0"),
    ("algorithm=frank_wolfe", "robust=soft_assignments needs a gradient"),
])
def test_bad_soft_assignment_settings_are_config_errors(compose_cfg, override, message):
    cfg = compose_cfg("data=synthetic", "data.noise=0.1", "robust=soft_assignments", override)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace(".", r"\.")):
        run(cfg)


def test_sa_keys_under_dro_and_sa_without_true_groups_are_clear_errors(compose_cfg):
    with pytest.raises(ConfigError, match="robust.timing='after_theta': a key of "
                                          "robust=soft_assignments only"):
        run(compose_cfg("data=synthetic", "data.noise=0.1", "robust=dro",
                        "robust.timing=after_theta"))
    with pytest.raises(ConfigError, match=r"needs P\(G = j \| Ĝ = k\).*set data.noise"):
        run(compose_cfg("data=synthetic", "trainer=smoke", "robust=soft_assignments"))


def _true_tpr_violation(model: torch.nn.Module, ds, tolerance: float) -> float:
    """max_j TPR − TPR_j − tolerance on the TRUE groups, computed directly from masks."""
    with torch.no_grad():
        yhat = model(ds.features).reshape(-1) > 0
    y, g = ds.labels > 0.5, ds.groups["group_true"]
    tpr = (yhat & y).sum() / y.sum()
    return max(float(tpr - (yhat & y & (g == j)).sum() / (y & (g == j)).sum() - tolerance)
               for j in range(len(ds.group_names["group_true"])))


def _naive_violation_means(seeds: int, n: int, play) -> list[float]:
    """Naive training's mean TRUE-group TPR violation on test at noise 0, 0.2, 0.4: equal
    opportunity (tolerance 0.05) on the noisy groups, ``play(model, copt, train)`` trains."""
    from fairgames.game import ConstrainedOptimizer, Problem
    from fairgames.rates import error_rate

    means = []
    for noise in (0.0, 0.2, 0.4):
        found = []
        for seed in range(seeds):
            splits = noisy_splits(make_synthetic(n=n, group_shift=1.5,
                                                 group_proportions=[0.7, 0.3], seed=seed),
                                  "group", noise, seed=seed)
            tr = splits.train
            cons = [(true_positive_rate(group("group", v)) >= true_positive_rate() - 0.05)
                    .named(f"eo{v}") for v in tr.group_names["group"]]
            torch.manual_seed(seed)
            model = torch.nn.Linear(tr.num_features, 1)
            copt = ConstrainedOptimizer(Problem(error_rate(), cons),
                                        torch.optim.Adam(model.parameters(), 0.05))
            play(model, copt, tr)
            found.append(_true_tpr_violation(model, splits.test, 0.05))
        means.append(sum(found) / len(found))
    return means


@pytest.mark.slow
def test_naive_training_true_group_violation_rises_with_noise():
    # the test: 5 seeds, noise 0, 0.2, 0.4; naive = the constraints on noisy groups
    from fairgames.train.loop.engine import LogSettings

    def play(model, copt, tr):
        Engine(model, copt, GameData(tr, "group"), steps=300,
               logging=LogSettings(every=300)).run()

    means = _naive_violation_means(5, 3000, play)
    assert means[1] >= means[0] + 0.01 and means[2] >= means[1] + 0.01, means


def test_naive_training_true_group_violation_rises_with_noise_fast():
    """The slow test's property at a smaller scale (2 seeds, 1 500 rows, 80 full-batch game
    steps): on the test split's TRUE groups, naive training's mean violation rises by >= 0.01
    from noise 0 to 0.2 to 0.4 (it is measured against the masks, not the game's rates)."""
    def play(model, copt, tr):
        fields = {"labels": tr.labels, "groups": {"group": tr.groups["group"]},
                  "group_values": {"group": tr.group_names["group"]}}
        for _ in range(80):
            copt.step_batch(model, tr.features, **fields)

    means = _naive_violation_means(2, 1500, play)
    assert means[1] >= means[0] + 0.01 and means[2] >= means[1] + 0.01, means


def test_the_verdict_of_a_robust_run_reads_the_robust_constraints_it_played(dro_run):
    """issue 56: the verdict judges the TV-ball worst case the DRO game played, with the noisy
    groups' g and the true groups' violation beside it, each as results.json has them."""
    from fairgames.train.results.verdict import SLACK, verdict_lines

    out = dro_run.results
    verdict, block = out["verdict"], out["robust"]
    assert "TV ball" in verdict["judged"]
    solution = out["solutions"]["recommended"]
    for name, v in verdict["constraints"].items():
        for split in ("train", "test"):
            robust = block["splits"][split]["robust_values"][name]
            assert v["values"][split] == pytest.approx(robust)
            assert v["noisy"][split] == pytest.approx(solution[split]["constraints"][name]["value"])
            assert v["true_violation"][split] == pytest.approx(
                block["splits"][split]["true_violations"][name])
        assert (v["status"] == "not_met") == (v["values"]["train"] > SLACK)
    lines = verdict_lines(verdict)
    assert "judged on the robust constraints" in lines[0]
    assert all("noisy groups' g: train" in ln for ln in lines[1:])


def test_a_missed_robust_constraint_is_never_read_met():
    from fairgames.noisy_groups.verdict import robust_verdict
    from fairgames.train.results.verdict import verdict_lines

    block = {"method": "soft_assignments", "gamma": {"a": 0.2}, "splits": {
        split: {"robust_values": {"eo": -1.0, "eq": None}, "soft_values": {"eo": 0.08,
                                                                           "eq": None}}
        for split in ("train", "test")}}
    noisy = {name: {"status": "met", "verdict": "met", "train": -0.02, "test": None,
                    "values": {"train": -0.02, "test": -0.01}, "intervals": {}}
             for name in ("eo", "eq")}
    v = robust_verdict(block, noisy, steps=100)
    assert "soft group assignments" in v["judged"]
    assert v["constraints"]["eo"]["status"] == "not_met"          # soft_values, not the TV's
    assert "trainer.steps=200" in v["constraints"]["eo"]["verdict"]
    # a constraint the robust evaluation does not cover keeps its noisy verdict, saying so
    assert v["constraints"]["eq"]["status"] == "met"
    assert "on the noisy groups" in v["constraints"]["eq"]["verdict"]
    lines = verdict_lines({"solution": "recommended", "resamples": 0, **v})
    assert lines[1].startswith("  eo: NOT met on train")
    # a run that is not robust keeps the problem's own verdict
    assert robust_verdict({**block, "method": "none"}, noisy, steps=100) is None
