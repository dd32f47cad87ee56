"""ConstrainedOptimizer: constraints met, exact violations, the dual gradient, checkpoints,
empty groups, no host sync, infeasibility, AMP, clipping, accumulation, bad input."""

from __future__ import annotations

import copy
import io

import numpy as np
import pytest
import torch

from fairgames.data import MinibatchSampler
from fairgames.game import ConstrainedOptimizer, GradientAscent, Problem
from fairgames.rates import (
    Batch,
    RateEvaluator,
    RatesError,
    error_rate,
    fmeasure,
    gmean,
    group,
    kld,
    no_host_sync,
    positive_prediction_rate,
    true_positive_rate,
)


def tpr(v: str):
    return true_positive_rate(group("group", v))


def tpr_parity(gap: float = 0.05):
    return [(tpr("1") >= tpr("0") - gap).named("gap_10"),
            (tpr("0") >= tpr("1") - gap).named("gap_01")]


def numpy_tprs(model, ds) -> tuple[float, float]:
    with torch.no_grad():
        pred = (model(ds.features)[:, 0] > 0).numpy()
    y, g = ds.labels.numpy() == 1, ds.groups["group"].numpy()
    return float(pred[y & (g == 0)].mean()), float(pred[y & (g == 1)].mean())


def test_tpr_parity_is_met_on_train_and_violations_equal_numpy(synthetic, helpers):
    problem = Problem(error_rate(), tpr_parity(0.05))
    free, _ = helpers.train(Problem(error_rate()), synthetic, steps=600)
    t0, t1 = numpy_tprs(free, synthetic)
    assert t0 - t1 > 0.2          # the unconstrained model violates parity by far
    model, copt = helpers.train(problem, synthetic, steps=1200)
    t0, t1 = numpy_tprs(model, synthetic)
    report = problem.report(helpers.split_values(problem, model, synthetic).true)
    # Exact whole-split violations equal numpy's (g = tpr_0 - tpr_1 - 0.05 for gap_10).
    assert report["gap_10"] == pytest.approx(t0 - t1 - 0.05, abs=1e-9)
    assert report["gap_01"] == pytest.approx(t1 - t0 - 0.05, abs=1e-9)
    assert report["objective"] == pytest.approx(
        float(((model(synthetic.features)[:, 0] > 0).float() != synthetic.labels)
              .double().mean()), abs=1e-9)
    # Met on train, up to minibatch noise in the last iterate.
    assert abs(t0 - t1) <= 0.05 + 0.01
    assert not copt.likely_infeasible()


def test_multiplier_gradient_is_the_true_violation_on_the_batch(synthetic, helpers):
    problem = Problem(error_rate(), tpr_parity(0.05))
    model = torch.nn.Linear(5, 1)
    player = GradientAscent(2, lr=1.0, radius=1e6)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.0),
                                multipliers=player)
    idx = torch.arange(500)
    copt.step_batch(model, synthetic.features[idx], **helpers.fields(synthetic, idx))
    with torch.no_grad():
        pred = (model(synthetic.features[idx])[:, 0] > 0).numpy()
    y, g = synthetic.labels[idx].numpy() == 1, synthetic.groups["group"][idx].numpy()
    t0, t1 = pred[y & (g == 0)].mean(), pred[y & (g == 1)].mean()
    gain = np.array([t0 - t1 - 0.05, t1 - t0 - 0.05])
    np.testing.assert_allclose(copt.last.rows_true.numpy(), gain, atol=1e-6)
    # One ascent step of length 1 from λ = 0, projected on λ ≥ 0.
    np.testing.assert_allclose(player.weights()[1].numpy(), np.maximum(gain, 0), atol=1e-6)


def _snapshot(model, copt):
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "copt": copt.state_dict()}, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


@pytest.mark.parametrize("case", ["proxy_lagrangian", "lagrangian_momentum", "algorithm3",
                                  "algorithm3_z", "kld_algorithm2"])
def test_checkpoint_round_trip_continues_bit_for_bit(synthetic, case, helpers):
    a, b = group("group", "0"), group("group", "1")
    options: dict = {}
    if case.startswith("algorithm3"):
        problem = Problem(-fmeasure(), [fmeasure(b) >= fmeasure(a) - 0.02])
        options["preset"] = "algorithm3"
        if case == "algorithm3_z":
            options["ratio_slacks"] = "gradient"
    elif case == "kld_algorithm2":
        problem = Problem(kld(a) + kld(b), [error_rate() <= 0.3])
        options["preset"] = "algorithm2"
    else:
        problem = Problem(error_rate(), tpr_parity(0.05))
        options["preset"] = "proxy_lagrangian" if case == "proxy_lagrangian" else "lagrangian"
    if case == "lagrangian_momentum":
        options["multiplier_options"] = {
            "optimizer": lambda p: torch.optim.SGD(p, lr=0.3, momentum=0.9, maximize=True)}
    sampler = MinibatchSampler(synthetic, batch_size=128, seed=3)
    batches = [next(iter(sampler)) for _ in range(40)]

    def make():
        torch.manual_seed(1)
        m = torch.nn.Linear(5, 1)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.5)
        return m, ConstrainedOptimizer(problem, opt, **options)

    def run(m, c, idxs):
        for idx in idxs:
            c.step_batch(m, synthetic.features[idx], **helpers.fields(synthetic, idx))
        return c.last

    model, copt = make()
    run(model, copt, batches[:20])
    saved = _snapshot(model, copt)
    last_a = run(model, copt, batches[20:])
    model2, copt2 = make()
    run(model2, copt2, batches[:3])            # a different state, overwritten by the load
    model2.load_state_dict(saved["model"])
    copt2.load_state_dict(saved["copt"])
    last_b = run(model2, copt2, batches[20:])
    for p, q in zip(model.parameters(), model2.parameters(), strict=True):
        assert torch.equal(p, q)
    assert torch.equal(last_a.multipliers, last_b.multipliers)
    assert torch.equal(last_a.slacks, last_b.slacks)
    assert torch.equal(last_a.rows_true, last_b.rows_true)
    assert torch.equal(copt.evaluator.running_average, copt2.evaluator.running_average)
    assert copt.steps == copt2.steps == 40


def test_checkpoint_of_another_problem_is_refused(synthetic):
    model = torch.nn.Linear(5, 1)
    c1 = ConstrainedOptimizer(Problem(error_rate(), tpr_parity()),
                              torch.optim.SGD(model.parameters(), lr=0.1))
    c2 = ConstrainedOptimizer(Problem(error_rate(), tpr_parity()[:1]),
                              torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="rows"):
        c2.load_state_dict(c1.state_dict())


def test_a_group_missing_from_a_minibatch_gives_no_nan(synthetic, helpers):
    problem = Problem(error_rate(), tpr_parity(0.05))
    g = synthetic.groups["group"]
    only0 = torch.nonzero(g == 0)[:200, 0]
    mixed = torch.arange(300)
    model = torch.nn.Linear(5, 1)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1))
    # Missing at the very first step (no running estimate yet), then after a normal step.
    for idx in (only0, mixed, only0, only0):
        loss = copt.step_batch(model, synthetic.features[idx], **helpers.fields(synthetic, idx))
        assert torch.isfinite(loss)
        assert torch.isfinite(copt.last.rows_true).all()
        assert all(torch.isfinite(w).all() for w in copt.weights())
        assert all(torch.isfinite(p).all() for p in model.parameters())


def _no_sync_steps(synthetic, helpers, case: str, device: torch.device) -> None:
    # "<case>+heldout": the same game, with a held-out batch recorded before every step
    # (record_heldout, Cotter et al. 2019's two-dataset game).
    case, heldout = case.removesuffix("+heldout"), case.endswith("+heldout")
    a, b = group("group", "0"), group("group", "1")
    problem = Problem(error_rate(), tpr_parity(0.05))
    options: dict = {}
    if case in ("proxy_lagrangian", "lagrangian", "amp"):
        options["preset"] = "lagrangian" if case == "lagrangian" else "proxy_lagrangian"
    elif case == "exponentiated_gradient":
        options["multipliers"] = "exponentiated_gradient"
    elif case == "algorithm3":
        problem = Problem(-fmeasure(), [fmeasure(b) >= fmeasure(a) - 0.02])
        options["preset"] = "algorithm3"
    elif case == "fmeasure_linearized":
        problem = Problem(-fmeasure(), [fmeasure(b) >= fmeasure(a) - 0.02])
    elif case == "gmean_algorithm2":
        problem = Problem(1.0 - gmean(), [error_rate() <= 0.4])
        options["preset"] = "algorithm2"
    elif case == "kld_algorithm2":
        problem = Problem(kld(a) + kld(b), [error_rate() <= 0.3])
        options["preset"] = "algorithm2"
    elif case == "nemsis_ftl":
        problem = Problem(1.0 - gmean())
        options["preset"] = "nemsis"
    elif case == "objective_surrogate":
        problem = Problem(error_rate(), tpr_parity(0.05), objective_surrogate="logistic")
    model = torch.nn.Linear(5, 1).to(device)
    # A fused optimizer takes the scaler's found_inf on the device (no .item() in scaler.step).
    opt = torch.optim.SGD(model.parameters(), lr=0.1, fused=case == "amp")
    copt = ConstrainedOptimizer(problem, opt, **options)
    scaler = torch.amp.GradScaler(device.type, init_scale=4.0) if case == "amp" else None
    def rows(idx):
        f = helpers.fields(synthetic, idx)
        return synthetic.features[idx].to(device), {
            "labels": f["labels"].to(device), "groups": {"group": f["groups"]["group"].to(device)},
            "group_values": f["group_values"]}

    x, f = rows(torch.arange(256))
    x_held, f_held = rows(torch.arange(256, 640))

    def step():
        copt.zero_grad()
        batch = Batch(scores=model(x)[:, 0], **f)
        loss = copt.lagrangian(batch)
        if heldout:
            with torch.no_grad():
                copt.record_heldout(Batch(scores=model(x_held)[:, 0], **f_held))
        if scaler is None:
            loss.backward()
            copt.step()
        else:
            scaler.scale(loss).backward()
            copt.step(scaler=scaler)
            scaler.update()

    step()   # the first step compiles the evaluation plan (host-side, once)
    with no_host_sync():
        step()
        step()
    assert all(torch.isfinite(w).all() for w in copt.weights())


SYNC_CASES = ["proxy_lagrangian", "lagrangian", "exponentiated_gradient", "algorithm3",
              "fmeasure_linearized", "gmean_algorithm2", "kld_algorithm2", "nemsis_ftl", "amp",
              "objective_surrogate", "proxy_lagrangian+heldout", "algorithm3+heldout",
              "kld_algorithm2+heldout", "amp+heldout"]


@pytest.mark.parametrize("case", SYNC_CASES)
def test_a_step_makes_no_host_sync(synthetic, helpers, case):
    _no_sync_steps(synthetic, helpers, case, torch.device("cpu"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("case", SYNC_CASES)
def test_a_cuda_step_makes_no_host_sync(synthetic, helpers, case):
    # no_host_sync() also sets torch.cuda.set_sync_debug_mode("error") on a GPU.
    _no_sync_steps(synthetic, helpers, case, torch.device("cuda"))


def test_infeasible_constraints_are_reported(synthetic, helpers):
    ppr = positive_prediction_rate(group("group", "1"))
    impossible = Problem(error_rate(), [ppr >= 0.8, ppr <= 0.2])
    for preset in ("proxy_lagrangian", "lagrangian"):
        _, copt = helpers.train(impossible, synthetic, steps=500, preset=preset)
        report = copt.infeasibility_report()
        assert copt.likely_infeasible(), (preset, report)
        assert report["violation_fast"] > 0.1
    feasible = Problem(error_rate(), [ppr >= 0.45, ppr <= 0.55])
    _, copt = helpers.train(feasible, synthetic, steps=500)
    assert not copt.likely_infeasible(), copt.infeasibility_report()


def test_amp_skipped_step_leaves_the_game_untouched(synthetic, helpers):
    problem = Problem(error_rate(), tpr_parity(0.05))
    model = torch.nn.Linear(5, 1)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1),
                                preset="lagrangian", multiplier_lr=1.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    x, f = synthetic.features[:256], helpers.fields(synthetic, torch.arange(256))

    def step(poison: bool):
        copt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            scores = model(x)[:, 0]
        loss = copt.lagrangian(Batch(scores=scores, **f))
        scaler.scale(loss).backward()
        if poison:
            model.weight.grad[0, 0] = float("inf")
        copt.step(scaler=scaler)
        scaler.update()

    step(False)
    before = (copy.deepcopy(copt.state_dict()), [p.clone() for p in model.parameters()])
    step(True)   # the scaler skips θ's step: λ and the monitor must not move either
    after = copt.state_dict()
    assert torch.equal(after["players"]["multipliers"]["lam"],
                       before[0]["players"]["multipliers"]["lam"])
    for k, v in after["players"]["monitor"].items():
        assert torch.equal(v, before[0]["players"]["monitor"][k]), k
    for p, q in zip(model.parameters(), before[1], strict=True):
        assert torch.equal(p, q)
    step(False)
    assert not torch.equal(copt.state_dict()["players"]["monitor"]["state"],
                           before[0]["players"]["monitor"]["state"])
    assert not torch.equal(copt.state_dict()["players"]["multipliers"]["lam"],
                           before[0]["players"]["multipliers"]["lam"])


def test_true_rates_are_fp32_under_autocast(synthetic, helpers):
    problem = Problem(error_rate(), tpr_parity(0.05))
    model = torch.nn.Linear(5, 1)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1))
    x, f = synthetic.features[:512], helpers.fields(synthetic, torch.arange(512))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        scores = model(x)[:, 0]
        assert scores.dtype == torch.bfloat16
        values = copt.evaluator(Batch(scores=scores, **f))
        loss = copt.lagrangian(Batch(scores=scores, **f), values)
    assert values.true.dtype == torch.float32 and loss.dtype == torch.float32
    pred = (scores.float() > 0).numpy()
    y = f["labels"].numpy()
    err = float((pred != (y == 1)).mean())
    assert float(values.true[0]) == pytest.approx(err, abs=1e-6)


def test_gradient_clipping_between_backward_and_step(synthetic, helpers):
    problem = Problem(error_rate(), tpr_parity(0.05))
    model = torch.nn.Linear(5, 1)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.5))
    x, f = synthetic.features[:256], helpers.fields(synthetic, torch.arange(256))
    copt.zero_grad()
    copt.lagrangian(Batch(scores=model(x)[:, 0], **f)).backward()
    raw = torch.cat([p.grad.flatten() for p in model.parameters()])
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    copt.step()
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    expected = -0.5 * raw * (1e-3 / raw.norm())
    torch.testing.assert_close(after - before, expected, atol=1e-7, rtol=1e-4)


def test_gradient_accumulation_averages_the_recorded_violations(synthetic, helpers):
    problem = Problem(error_rate(), tpr_parity(0.0))
    model = torch.nn.Linear(5, 1)
    player = GradientAscent(2, lr=1.0, radius=1e6)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.0),
                                multipliers=player)
    gains = []
    copt.zero_grad()
    for idx in (torch.arange(0, 400), torch.arange(400, 800)):
        copt.lagrangian(Batch(scores=model(synthetic.features[idx])[:, 0],
                              **helpers.fields(synthetic, idx))).backward()
        with torch.no_grad():
            pred = (model(synthetic.features[idx])[:, 0] > 0).numpy()
        y, g = synthetic.labels[idx].numpy() == 1, synthetic.groups["group"][idx].numpy()
        d = pred[y & (g == 0)].mean() - pred[y & (g == 1)].mean()
        gains.append([d, -d])
    copt.step()
    expected = np.maximum(np.mean(gains, axis=0), 0)
    np.testing.assert_allclose(player.weights()[1].numpy(), expected, atol=1e-6)


def test_history_hook_sees_every_step(synthetic, helpers):
    problem = Problem(error_rate(), tpr_parity(0.05))
    seen = []
    model = torch.nn.Linear(5, 1)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1))
    remove = copt.register_history_hook(seen.append)
    for i in range(3):
        idx = torch.arange(i * 200, (i + 1) * 200)
        copt.step_batch(model, synthetic.features[idx], **helpers.fields(synthetic, idx))
    remove()
    idx = torch.arange(200)
    copt.step_batch(model, synthetic.features[idx], **helpers.fields(synthetic, idx))
    assert [r.step for r in seen] == [0, 1, 2]
    for r in seen:
        # Affine constraints: the rows are the constraints themselves.
        torch.testing.assert_close(r.rows_true, r.constraints_true)
        assert r.multipliers.shape == (2,) and r.objective_weight.dim() == 0
    host = seen[-1].to_host()
    assert isinstance(host["objective_true"], float) and len(host["constraints_true"]) == 2


def test_bad_calls_raise_clear_errors(synthetic, helpers):
    problem = Problem(error_rate(), tpr_parity())
    model = torch.nn.Linear(5, 1)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(RuntimeError, match="lagrangian"):
        copt.step()
    with pytest.raises(TypeError, match="Batch"):
        copt.lagrangian(model(synthetic.features)[:, 0])
    with pytest.raises(TypeError, match="Problem"):
        ConstrainedOptimizer(tpr_parity(), torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(TypeError, match="torch.optim.Optimizer"):
        ConstrainedOptimizer(problem, model)
    with pytest.raises(ValueError, match="unknown preset"):
        ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1),
                             preset="algorithm9")
    with pytest.raises(ValueError, match="radius"):
        ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1), radius=5.0)
    copt.lagrangian(Batch(scores=model(synthetic.features)[:, 0], **helpers.fields(synthetic)))
    with pytest.raises(RuntimeError, match="after step"):
        copt.state_dict()


@pytest.mark.parametrize("how", ["no_grad", "detach"])
def test_scores_without_gradient_are_refused_at_lagrangian(synthetic, helpers, how):
    # backward() would fail in torch's words ("element 0 of tensors does not require
    # grad"); requires_grad is a Python attribute, so lagrangian() tells it without a sync
    problem = Problem(error_rate(), tpr_parity())
    model = torch.nn.Linear(5, 1)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1))
    if how == "no_grad":
        with torch.no_grad():
            scores = model(synthetic.features)[:, 0]
    else:
        scores = model(synthetic.features)[:, 0].detach()
    batch = Batch(scores=scores, **helpers.fields(synthetic))
    with pytest.raises(RatesError, match=r"lagrangian\(\): the batch's scores carry no gradient"
                                         r".*with gradients enabled.*torch\.no_grad\(\)"):
        copt.lagrangian(batch).backward()
    with no_host_sync():    # the check reads no value: a valid batch passes without a sync
        copt.lagrangian(Batch(scores=model(synthetic.features)[:, 0],
                              **helpers.fields(synthetic)))


@pytest.mark.parametrize("labels_on", ["cpu", "meta"])
def test_scores_on_the_meta_device_are_refused_naming_the_remedy(synthetic, helpers, labels_on):
    """Issue 55: a model built on the ``meta`` device (shapes, no storage) gave arbitrary
    rates or torch's internal errors; the batch refuses it when built, for lagrangian() and
    the rate evaluator alike. ``device.type`` is a Python attribute: no host-device sync."""
    problem = Problem(error_rate(), tpr_parity())
    with torch.device("meta"):
        model = torch.nn.Linear(5, 1)
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1))
    fields = helpers.fields(synthetic)
    fields["labels"] = fields["labels"].to(labels_on)
    scores = model(synthetic.features.to("meta"))[:, 0]
    message = r"on the meta device.*to_empty\(device=.*initialise"
    with pytest.raises(RatesError, match=message):
        copt.lagrangian(Batch(scores=scores, **fields))
    with pytest.raises(RatesError, match=message):
        RateEvaluator([error_rate()])(Batch(scores=scores, **fields))
    # the remedy: materialise the model on a real device and initialise its parameters
    model.to_empty(device="cpu")
    model.reset_parameters()
    copt = ConstrainedOptimizer(problem, torch.optim.SGD(model.parameters(), lr=0.1))
    loss = copt.lagrangian(Batch(scores=model(synthetic.features)[:, 0],
                                 **helpers.fields(synthetic)))
    loss.backward()
    assert torch.isfinite(loss) and model.weight.grad is not None
