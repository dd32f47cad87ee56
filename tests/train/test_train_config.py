"""The Hydra configs: every group option composes and validates; unknown keys and bad values
fail with messages that name them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ValidationError

from fairgames.data.registry import DATASETS
from fairgames.game import PRESETS
from fairgames.problems import ProblemSyntaxError, available_problems
from fairgames.train import ConfigError, NoCheckpointError, run, validate
from fairgames.train.data import apply_recipe, load_splits, loaded_keys

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
CONFIGS_GROUPS = ["model", "optimizer", "algorithm", "trainer", "problem", "data"]


def test_default_config_is_the_quick_real_job(compose_cfg):
    cfg = compose_cfg()
    validate(cfg)
    # data.protected null: the recipe's, Adult's sex (as the run records it)
    assert cfg.data.name == "adult" and cfg.data.protected is None
    data = apply_recipe(dict(cfg.data), dict(cfg.problem.recipe))
    assert loaded_keys(data, load_splits(data, 0))["protected"] == "sex"
    assert cfg.problem.name == "equal_opportunity"
    assert cfg.trainer.steps is None and cfg.trainer.batch_size is None   # by the problem
    assert cfg.trainer.device == "auto" and cfg.seed == 0
    # Keys every issue agrees on exist at their documented places.
    for key in ("data.protected", "problem.tolerance", "trainer.steps", "trainer.batch_size",
                "trainer.device", "seed", "algorithm.multiplier_lr", "algorithm.radius",
                "problem.baseline_path"):
        node, leaf = cfg, key.split(".")
        for part in leaf[:-1]:
            node = node[part]
        assert leaf[-1] in node, key


@pytest.mark.parametrize("group", CONFIGS_GROUPS)
def test_every_group_option_composes_and_validates(compose_cfg, group):
    options = sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))
    assert options
    for option in options:
        cfg = compose_cfg(f"{group}={option}")
        validate(cfg)


def test_algorithm_options_are_the_game_presets_and_the_reduction(compose_cfg):
    folder = CONFIGS / "algorithm"
    assert {p.stem for p in folder.glob("*.yaml")} == set(PRESETS) | {"reduction"}
    for name in [*PRESETS, "reduction"]:
        assert compose_cfg(f"algorithm={name}").algorithm.name == name
    assert set(available_problems()) >= {"fmeasure_parity", "kld_error", "churn"}


def test_unknown_keys_fail_at_compose_time(compose_cfg):
    with pytest.raises(ConfigCompositionException) as info:
        compose_cfg("trainer.stepz=10")
    assert "stepz" in str(info.value.__cause__ or info.value)
    # Hydra's `+key=value` forces a key past the schema: validate() names it.
    with pytest.raises(ConfigError,
                       match=r"unknown key problem.slack; problem takes \[.*'tolerance'"):
        validate(compose_cfg("+problem.slack=0.1"))
    with pytest.raises(ConfigError, match="unknown key 'modle'"):
        validate(compose_cfg("+modle.name=mlp"))


def test_wrong_types_fail_at_compose_time(compose_cfg):
    with pytest.raises(ConfigCompositionException) as info:
        compose_cfg("trainer.steps=many")
    cause = info.value.__cause__
    assert isinstance(cause, ValidationError) and "trainer.steps" in str(cause)


def test_bad_values_are_all_listed(compose_cfg):
    cfg = compose_cfg("trainer.device=gpu", "optimizer.lr=-1", "trainer.batch_size=0",
                      "algorithm=lagrangian", "algorithm.radius=0", "model.name=resnet",
                      "problem.tolerance_kind=percent", "trainer.selection_split=dev",
                      "model.sparse_inputs=always")
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    msg = str(info.value)
    for fragment in ("trainer.device='gpu'", "['auto', 'cpu', 'cuda']", "optimizer.lr=-1.0",
                     "trainer.batch_size=0", "algorithm.radius=0.0", "model.name='resnet'",
                     "problem.tolerance_kind='percent'", "trainer.selection_split='dev'",
                     "model.sparse_inputs='always'"):
        assert fragment in msg, fragment


def test_swap_regret_has_no_radius(compose_cfg):
    with pytest.raises(ConfigError, match="swap-regret λ-player .* has no radius"):
        validate(compose_cfg("algorithm=proxy_lagrangian", "algorithm.radius=5"))
    with pytest.raises(ConfigError, match="algorithm.name='adam'"):
        validate(compose_cfg("algorithm.name=adam"))


def test_data_keys_are_checked_against_the_loader(compose_cfg):
    cfg = compose_cfg("data=synthetic", "+data.rows=10")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['rows'\].*'n'"):
        load_splits(cfg.data, 0)
    cfg = compose_cfg("data=synthetic", "data.protected=sex")
    with pytest.raises(ConfigError, match=r"data.protected='sex'.*\['group'\]"):
        load_splits(cfg.data, 0)


def test_a_problem_string_error_points_at_the_token(compose_cfg, tmp_path):
    cfg = compose_cfg("data=synthetic", "data.n=300", "trainer=smoke",
                      "problem.objective='1 - fmesure()'")
    with pytest.raises(ProblemSyntaxError) as info:
        run(cfg, run_dir=tmp_path)
    e = info.value
    assert "unknown function 'fmesure'" in e.message and "did you mean 'fmeasure'" in e.message
    assert e.position == 4
    assert str(e).splitlines()[-1] == "      ^^^^^^^"


@pytest.mark.parametrize("problem, steps", [
    # affine in the rates: the game settles by 500 full-batch steps
    ("equal_opportunity", 500), ("demographic_parity", 500), ("error", 500), ("churn", 500),
    ("neyman_pearson", 500),
    # a ratio of rates or a ψ: 1 000 (benchmarks/results/solved_by_default.discussion.md)
    ("fmeasure_parity", 1000), ("predictive_parity", 1000), ("fmeasure", 1000),
    ("kld", 1000), ("kld_error", 1000), ("gmean", 1000), ("hmean", 1000), ("qmean", 1000)])
def test_null_steps_are_the_problem_familys_budget(problem, steps, compose_cfg):
    from fairgames.data import make_synthetic
    from fairgames.game import default_steps
    from fairgames.problems import load_problem
    from fairgames.train.evaluation import statements

    train = make_synthetic(n=600, seed=0).train
    spec = load_problem(problem)
    assert default_steps(*statements(spec, train, "group")) == steps


def test_a_run_with_null_steps_plays_the_problems_budget(compose_cfg, tmp_path):
    cfg = compose_cfg("data=synthetic", "data.n=300", "trainer=smoke", "trainer.steps=null",
                      "trainer.progress=false", "trainer.early_stop.enabled=false")
    result = run(cfg, run_dir=tmp_path)
    assert result.results["training"]["steps"] == 500          # equal opportunity: affine


def test_resume_without_checkpoint_is_clear(compose_cfg, tmp_path):
    cfg = compose_cfg("data=synthetic", "data.n=300", "trainer=smoke",
                      f"trainer.resume={tmp_path}")
    with pytest.raises(FileNotFoundError, match="no checkpoint at") as info:
        run(cfg)
    assert isinstance(info.value, NoCheckpointError)        # the CLI's exit status 2
    assert "give the directory of a run that wrote one" in str(info.value)


@pytest.mark.parametrize("algorithm, problem, surrogate, fragment", [
    # a surrogate λ-player on a non-monotone ψ with a bound surrogate (auto picks the sigmoid)
    ("spade", "kld", "hinge", "Remark 3"),
    ("frank_wolfe", "fmeasure_parity", "auto", "ratio terms"),   # FTL has no ratio path
])
def test_an_algorithm_that_cannot_play_the_problem_is_a_config_error(compose_cfg, tmp_path,
                                                                       algorithm, problem,
                                                                       surrogate, fragment):
    cfg = compose_cfg("data=synthetic", "data.n=300", "trainer=smoke",
                      f"algorithm={algorithm}", f"problem={problem}",
                      f"algorithm.surrogate={surrogate}")
    with pytest.raises(ConfigError, match=f"algorithm={algorithm} cannot play "
                                          f"problem={problem}: .*{fragment}"):
        run(cfg, run_dir=tmp_path)


@pytest.mark.parametrize("problem, tolerance, fragment", [
    ("equal_opportunity", -0.5, r"difference of rates and must lie in \[0, 1\)"),
    ("equal_opportunity", 1.5, r"constraint 'tpr' \(tolerance_kind=difference\): tolerance is "
                               r"a difference of rates and must lie in \[0, 1\) .*got 1.5"),
    ("kld_error", 0.0, "ratio and must be > 0"),
    ("neyman_pearson", 1.5, r"bounds a rate and must lie in \[0, 1\]"),
])
def test_a_tolerance_outside_its_kind_is_refused(compose_cfg, tmp_path, problem, tolerance,
                                                 fragment):
    from fairgames.problems import ProblemError

    cfg = compose_cfg("data=synthetic", "data.n=300", "trainer=smoke", f"problem={problem}",
                      f"problem.tolerance={tolerance}")
    with pytest.raises(ProblemError, match=fragment):
        run(cfg, run_dir=tmp_path)


def test_an_empty_validation_split_names_the_keys_to_set(compose_cfg):
    # (The real loaders' case, paper 003's protocol on Adult, is in test_train_real.py.)
    cfg = compose_cfg("data=synthetic", "data.n=300", "+data.split=[0.8,0.0,0.2]")
    with pytest.raises(ConfigError, match="empty validation split.*data.split"):
        load_splits(cfg.data, 0)


def test_the_multiplier_optimizer_steps_the_gradient_ascent_player(train_run, compose_cfg):
    """``algorithm.multiplier_optimizer=adam`` (TFCO's constraint_optimizer, Adam in paper
    000's code): the λ-player's step is Adam's — after the first update λ = lr·sign(gain) on
    each active row, where plain OGD gives lr·gain — and it is refused where the λ-player
    is not gradient ascent."""
    from fairgames.game.players import MULTIPLIER_OPTIMIZERS as LAMBDA_OPTIMIZERS

    with pytest.raises(ConfigError, match="algorithm.multiplier_optimizer='adam': the "
                                          "swap-regret λ-player .*has no multiplier_optimizer; "
                                          "the gradient-ascent λ-player takes it"):
        validate(compose_cfg("algorithm=proxy_lagrangian", "algorithm.multiplier_optimizer=adam"))
    with pytest.raises(ConfigError, match="algorithm.multiplier_optimizer='rmsprop'"):
        validate(compose_cfg("algorithm=algorithm2", "algorithm.multiplier_optimizer=rmsprop"))
    # the λ-player's key becomes its `optimizer=` argument (null: plain projected OGD)
    def lam_options(name):
        return PRESETS["lagrangian"].optimizer_arguments(
            {"multiplier_optimizer": name})["multiplier_options"]
    assert lam_options(None) == {}
    # one name → one torch class, for θ's optimizer and the λ-player's
    from fairgames.train.config import MULTIPLIER_OPTIMIZERS, OPTIMIZERS
    from fairgames.train.run import TORCH_OPTIMIZERS
    # νPI is the λ-player's own (a PI controller of the multipliers, issue 57), not θ's
    shared = set(MULTIPLIER_OPTIMIZERS) - {"nupi"}
    assert set(TORCH_OPTIMIZERS) == set(OPTIMIZERS) >= shared
    assert all(LAMBDA_OPTIMIZERS[n] is TORCH_OPTIMIZERS[n] for n in shared)
    assert lam_options("nupi") == {"optimizer": LAMBDA_OPTIMIZERS["nupi"]}
    assert lam_options("adagrad") == {"optimizer": torch.optim.Adagrad}
    res = train_run("lam_adam", "problem=equal_opportunity", "algorithm=lagrangian",
                    "algorithm.multiplier_optimizer=adam", "algorithm.multiplier_lr=0.01")
    player = res.engine.copt.multipliers
    assert isinstance(player.optimizer, torch.optim.Adam)
    assert player.optimizer.param_groups[0]["maximize"] and player.optimizer.param_groups[0][
        "lr"] == 0.01
    gain = torch.tensor([0.3, -0.2])[: player.num_rows]
    player.load_state_dict({"lam": torch.zeros(player.num_rows), "optimizer":
                            type(player.optimizer)([torch.nn.Parameter(torch.zeros(1))],
                                                   lr=0.01, maximize=True).state_dict()})
    player.update(gain)
    expected = torch.clamp(0.01 * torch.sign(gain), min=0.0)
    torch.testing.assert_close(player.weights()[1], expected, atol=1e-6, rtol=1e-4)


def test_a_setting_no_player_of_the_game_takes_is_refused(compose_cfg):
    """A key is taken when a player of the preset (after algorithm.multipliers) declares it;
    set to anything but its default otherwise, it is refused — all such keys in one message,
    each naming the game's player that lacks it and the players that take it."""
    cfg = compose_cfg("algorithm=nemsis", "algorithm.multiplier_lr=0.5",
                      "algorithm.theta_steps=5", "algorithm.multiplier_optimizer=sgd")
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    lines = str(info.value).splitlines()[1:]
    assert [ln.strip().split("=")[0] for ln in lines] == [
        "algorithm.multiplier_optimizer", "algorithm.multiplier_lr", "algorithm.theta_steps"]
    assert ("the follow-the-leader λ-player of algorithm=nemsis has no multiplier_lr; the "
            "gradient-ascent, exponentiated-gradient and swap-regret λ-players take it") in lines[1]
    assert ("the gradient θ-player of algorithm=nemsis has no theta_steps; the best-response "
            "θ-player takes it: leave it at 20 or pick an algorithm that plays it "
            "(frank_wolfe, algorithm1)") in lines[2]
    # a setting left at its default is not "set" (reproduce_000 pins theta_steps=20 for all)
    validate(compose_cfg("algorithm=proxy_lagrangian", "algorithm.theta_steps=20"))
    # swapping the λ-player swaps its settings: algorithm2's step is not handed to
    # follow-the-leader (issue 57: as in Python), but a step the command line names is refused
    validate(compose_cfg("algorithm=algorithm2", "algorithm.multipliers=follow_the_leader"))
    with pytest.raises(ConfigError, match=r"algorithm.multiplier_lr=0.5: the follow-the-leader "
                                          r"λ-player of algorithm=algorithm2"):
        validate(compose_cfg("algorithm=algorithm2", "algorithm.multipliers=follow_the_leader",
                             "algorithm.multiplier_lr=0.5"))
    validate(compose_cfg("algorithm=proxy_lagrangian", "algorithm.multipliers=gradient_ascent",
                         "algorithm.radius=5", "algorithm.multiplier_optimizer=adam"))


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_a_data_config_leaves_the_split_to_the_papers_recipe(compose_cfg, name):
    """``data=<d> data.paper=<p>`` splits as paper p's recipe does (adult.yaml once fixed the
    official split, so paper 004's 0.6/0.2/0.2 re-splits of all 48 842 rows never happened)."""
    from fairgames.data.loaders import _resolve

    for paper, recipe in DATASETS[name].recipes.items():
        overrides = [f"data={name}"] + ([f"data.paper={paper}"] if paper is not None else [])
        keys = dict(compose_cfg(*overrides).data)
        choice = _resolve(name, keys["protected"], keys["target"], keys["split"],
                          keys["include_protected"], keys["validation_fraction"],
                          keys["paper"], None)
        assert choice.mode == recipe.split, (name, paper)


def test_paper_004_adult_is_a_random_split_of_all_rows(compose_cfg):
    data = dict(compose_cfg("data=adult", "data.paper=004").data)
    sizes = [len(s) for s in load_splits(data, 3)]
    assert sum(sizes) == 48_842 and sizes == [29_306, 9_768, 9_768]   # 0.6 / 0.2 / 0.2
    official = [len(s) for s in load_splits(dict(compose_cfg("data=adult").data), 3)]
    assert official[2] == 16_281                                        # adult.test
