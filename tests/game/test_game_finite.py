"""Non-finite steps: flagged on the device, skipped bit for bit by every player (θ's optimizer
included), reported by ``copt.check()``; ``strict=True`` and the clear errors of bad values."""

from __future__ import annotations

import copy

import pytest
import torch

from fairgames.game import ConstrainedOptimizer, NonFiniteStepError, Problem
from fairgames.rates import (
    Batch,
    NonFiniteScoresError,
    RatesError,
    error_rate,
    group,
    no_host_sync,
    true_positive_rate,
)


def _problem() -> Problem:
    tpr = lambda v: true_positive_rate(group("group", v))  # noqa: E731
    return Problem(error_rate(), [(tpr("1") >= tpr("0") - 0.02).named("eo")])


def _game(synthetic, *, optimizer: str = "adam", **options):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(synthetic.num_features, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 1))
    opt = (torch.optim.Adam(model.parameters(), lr=0.05) if optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    return model, ConstrainedOptimizer(_problem(), opt, **options)


def _rows(synthetic, helpers, k: int):
    idx = torch.arange(256 * k, 256 * (k + 1))
    return synthetic.features[idx].clone(), helpers.fields(synthetic, idx)


def _step(model, copt, x, f, *, poison: str | None = None, weights=None):
    copt.zero_grad()
    if poison == "features":
        x = x.clone()
        x[5, 0] = float("nan")
    scores = model(x)[:, 0]
    if poison == "scores":
        scores = scores * torch.where(torch.arange(len(x)) == 7, float("inf"), 1.0)
    loss = copt.lagrangian(Batch(scores=scores, weights=weights, **f))
    loss.backward()
    if poison == "gradient":
        next(model.parameters()).grad[0, 0] = float("nan")
    copt.step()


def _state(model, copt):
    return ([p.detach().clone() for p in model.parameters()],
            copy.deepcopy(copt.state_dict()))


def _assert_equal(a, b, path=""):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), (path, a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_equal(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_equal(x, y, path + "[]")
    else:
        assert a == b, (a, b)


@pytest.mark.parametrize("poison", ["features", "scores", "gradient"])
@pytest.mark.parametrize(("optimizer", "preset"), [("adam", "lagrangian"),
                                                    ("sgd", "proxy_lagrangian")])
def test_a_bad_step_changes_nothing_and_later_steps_continue_exactly(
        synthetic, helpers, poison, optimizer, preset):
    batches = [_rows(synthetic, helpers, k) for k in range(4)]
    clean_model, clean = _game(synthetic, optimizer=optimizer, preset=preset)
    model, copt = _game(synthetic, optimizer=optimizer, preset=preset)
    for x, f in batches[:2]:
        _step(clean_model, clean, x, f)
        _step(model, copt, x, f)
    params, state = _state(model, copt)
    _step(model, copt, *batches[2], poison=poison)
    after_params, after_state = _state(model, copt)
    _assert_equal(after_params, params)           # θ and its optimizer state, bit for bit
    state["steps"] += 1                           # the skipped step still counts as played
    # the evaluator's own record that it saw a non-finite score (its check_finite's flag)
    seen = after_state["evaluator"].pop("nonfinite_seen")
    assert bool(seen) == (poison != "gradient") and not state["evaluator"].pop("nonfinite_seen")
    _assert_equal(after_state, state)             # λ, slacks, monitor, θ's Adam moments,
    #                                               the evaluator's running estimates
    for x, f in batches[2:]:                      # the good steps continue as if no bad one
        _step(clean_model, clean, x, f)
        _step(model, copt, x, f)
    _assert_equal([p.detach() for p in model.parameters()],
                  [p.detach() for p in clean_model.parameters()])
    _assert_equal(copt.state_dict()["players"]["multipliers"],
                  clean.state_dict()["players"]["multipliers"])
    with pytest.raises(NonFiniteStepError, match="step 2 .*met non-finite") as info:
        copt.check()
    assert info.value.step == 2 and info.value.count == 1
    expected = {"features": {"scores", "loss", "gradients"}, "scores": {"scores", "loss"},
                "gradient": {"gradients"}}[poison]
    assert expected <= set(info.value.kinds), info.value.kinds
    assert "lower the learning rate" in str(info.value)
    copt.check()                                  # reset by the check that raised
    clean.check()                                 # nothing went wrong there


def test_the_estimates_are_restored_whether_or_not_they_share_one_tensor(synthetic, helpers):
    # The evaluator's running estimates are views of one vector, restored as one tensor; a
    # module whose buffers were rebound one by one (moved, loaded with assign=True) has
    # separate tensors, restored one by one: a bad step leaves both kinds as they were.
    batches = [_rows(synthetic, helpers, k) for k in range(2)]
    for separate in (False, True):
        model, copt = _game(synthetic)
        ev = copt.evaluator
        if separate:
            for name in ("running_average", "rate_average", "rate_decay_power"):
                setattr(ev, name, getattr(ev, name).clone())
            copt._guard.forget(buffers=True)
        base = ev.running_average._base
        assert (base is not None and base is ev.rate_average._base) != separate
        _step(model, copt, *batches[0])
        before = {k: v.clone() for k, v in ev.state_dict().items()}
        _step(model, copt, *batches[1], poison="scores")
        after = ev.state_dict()
        assert bool(after.pop("nonfinite_seen")) and not before.pop("nonfinite_seen")
        _assert_equal(after, before)
        with pytest.raises(NonFiniteStepError):
            copt.check()


def test_merge_views_takes_the_base_of_an_exact_tiling_only():
    from fairgames.game.finite import _merge_views

    base = torch.arange(6.0)
    merged = _merge_views([base[3:], base[:2], base[2]])       # any order, a 0-d view too
    assert len(merged) == 1 and merged[0] is base
    other = torch.zeros(2)
    for views in ([base[:2], base[3:]], [base[:4], base[3:]]):  # a gap, an overlap
        kept = _merge_views([*views, other])
        assert len(kept) == 3 and all(any(k is t for t in [*views, other]) for k in kept)


def test_a_bad_first_step_leaves_a_fresh_optimizer_state(synthetic, helpers):
    # Adam creates its state at its first step; a skipped first step resets it to the zeros
    # Adam starts from, so the run continues as if it had never happened.
    batches = [_rows(synthetic, helpers, k) for k in range(3)]
    clean_model, clean = _game(synthetic)
    model, copt = _game(synthetic)
    _step(model, copt, *batches[0], poison="features")
    for x, f in batches:
        _step(clean_model, clean, x, f)
        _step(model, copt, x, f)
    _assert_equal([p.detach() for p in model.parameters()],
                  [p.detach() for p in clean_model.parameters()])
    with pytest.raises(NonFiniteStepError, match="step 0 "):
        copt.check()


def test_negative_or_non_finite_weights_skip_the_step(synthetic, helpers):
    model, copt = _game(synthetic)
    x, f = _rows(synthetic, helpers, 0)
    _step(model, copt, x, f, weights=torch.ones(256))
    params, _ = _state(model, copt)
    bad = torch.ones(256)
    bad[9] = -0.5
    _step(model, copt, x, f, weights=bad)
    _assert_equal([p.detach() for p in model.parameters()], params)
    with pytest.raises(NonFiniteStepError, match="weights") as info:
        copt.check()
    assert info.value.kinds == ("weights",)
    strict_model, strict = _game(synthetic, strict=True)
    with pytest.raises(RatesError, match=r"weights must be finite and non-negative: 1 of 256 "
                                         r"rows is not, e.g. row 9 = -0.5; drop those rows"):
        _step(strict_model, strict, x, f, weights=bad)


def test_negative_weights_are_named_as_negative_not_non_finite(synthetic, helpers):
    # A negative weight is finite: the report counts them, names the first row and the
    # remedy (weights must be >= 0) instead of calling them "non-finite".
    model, copt = _game(synthetic)
    x, f = _rows(synthetic, helpers, 0)
    bad = torch.ones(256)
    bad[[9, 40]] = -0.5
    _step(model, copt, x, f, weights=bad)
    with pytest.raises(NonFiniteStepError, match=r"step 0 .*met negative weights \(2 rows, the "
                       r"first row 9 of its batch\).*weights must be >= 0") as info:
        copt.check()
    assert "non-finite weights" not in str(info.value)
    assert info.value.kinds == ("weights",)
    _step(model, copt, x, f, weights=torch.ones(256))
    nan = torch.ones(256)
    nan[3] = float("nan")
    _step(model, copt, x, f, weights=nan)
    with pytest.raises(NonFiniteStepError, match="step 2 .*met non-finite weights"):
        copt.check()


def test_strict_stops_at_the_bad_batch_or_step(synthetic, helpers):
    x, f = _rows(synthetic, helpers, 0)
    model, copt = _game(synthetic, strict=True)
    _step(model, copt, x, f)
    with pytest.raises(NonFiniteScoresError, match=r"scores contain NaN or inf: 1 of 256 rows "
                                                   r"is not, e.g. row 7 = inf"):
        _step(model, copt, x, f, poison="scores")
    model, copt = _game(synthetic, strict=True)
    with pytest.raises(NonFiniteStepError, match="step 0 .*gradients"):
        _step(model, copt, x, f, poison="gradient")
    bad = dict(f, labels=f["labels"].clone())
    bad["labels"][3] = 2.0
    model, copt = _game(synthetic, strict=True)
    with pytest.raises(RatesError, match=r"binary labels must be 0 or 1: .*row 3 = 2\.0"):
        copt.lagrangian(Batch(scores=model(x)[:, 0], **bad))


@pytest.mark.parametrize("what", ["labels", "codes"])
def test_bad_labels_or_codes_in_a_training_pass_get_a_clear_error(synthetic, helpers, what):
    # Without strict: the fused pass indexes with them and fails; the error says why.
    x, f = _rows(synthetic, helpers, 0)
    f = dict(f, labels=f["labels"].clone(), groups={"group": f["groups"]["group"].clone()})
    if what == "labels":
        f["labels"][4] = 3.0
        message = r"binary labels must be 0 or 1: 1 of 256 rows is not, e.g. row 4 = 3\.0"
    else:
        f["groups"]["group"][[2, 6]] = 5
        message = (r"group 'group': codes must lie in 0\.\.1 .*2 of 256 rows are not, "
                   r"e\.g\. row 2 = 5, row 6 = 5; recode")
    model, copt = _game(synthetic)
    with pytest.raises(RatesError, match=message):
        copt.lagrangian(Batch(scores=model(x)[:, 0], **f))


def test_a_best_response_step_is_skipped_too(synthetic, helpers):
    x, f = _rows(synthetic, helpers, 0)
    model, copt = _game(synthetic, optimizer="sgd", theta="best_response")
    copt.step_batch(model, x, **f)
    params, state = _state(model, copt)
    x_bad = x.clone()
    x_bad[0, 1] = float("inf")
    copt.step_batch(model, x_bad, **f)
    _assert_equal([p.detach() for p in model.parameters()], params)
    after = copt.state_dict()
    _assert_equal(after["players"]["multipliers"], state["players"]["multipliers"])
    with pytest.raises(NonFiniteStepError, match="step 1 "):
        copt.check()


def test_the_flag_makes_no_host_sync(synthetic, helpers):
    # SGD: torch's own Adam reads its step counter with .item() (its sync, not the game's)
    x, f = _rows(synthetic, helpers, 0)
    model, copt = _game(synthetic, optimizer="sgd")
    _step(model, copt, x, f, weights=torch.ones(256))     # compiles the plan
    with no_host_sync():
        _step(model, copt, x, f, weights=torch.ones(256))
        _step(model, copt, x, f, poison="features", weights=torch.ones(256))
        _step(model, copt, x, f, weights=torch.ones(256))
    with pytest.raises(NonFiniteStepError, match="step 2 "):
        copt.check()
