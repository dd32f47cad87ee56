"""The game is open to plug-ins: a player defined here, outside ``fairgames/``, joins a game.

``GroupAdversary`` reweights the examples of one group inside the simplex to maximise that
group's error (projected gradient ascent on the per-example 0/1 losses it saw through its
transform, the per-example adversary of DRO-type games). The tests check that it changes the
trajectory, that the fused pass sees its weights (the recorded rates equal numpy's weighted
rates), that its step size is a parameter group driven by a scheduler, and that a state_dict
round trip resumes bit for bit.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from fairgames.game import ConstrainedOptimizer, Player, Problem, project_simplex
from fairgames.rates import Batch, error_rate, group, true_positive_rate


class GroupAdversary(Player):
    """Per-example weights ``p`` in the simplex over the examples of group ``code``; the batch
    weight of member ``i`` becomes ``n_g·p_i`` (others keep 1): ``p`` ascends their errors."""

    name, order = "adversary", 30

    def __init__(self, attribute: str, code: int, *, lr: float = 0.5) -> None:
        self.attribute, self.code, self.lr_value = attribute, code, lr

    def bind(self, game) -> None:
        self.lr = torch.tensor(self.lr_value, device=game.device)
        self.p: torch.Tensor | None = None
        self._losses: torch.Tensor | None = None

    def transform(self, batch: Batch) -> Batch:
        ids = batch.example_ids
        member = (batch.groups[self.attribute] == self.code).float()
        if self.p is None:       # uniform over the members of the first batch
            self.p = member / member.sum()
        with torch.no_grad():
            wrong = ((batch.scores > 0).float() != batch.labels).float()
            self._losses, self._member = wrong * member, member
        weight = 1.0 - member + member * member.sum() * self.p[ids]
        base = batch.weights if batch.weights is not None else torch.ones_like(weight)
        return dataclasses.replace(batch, weights=base * weight)

    def play(self, round) -> None:
        assert self.p is not None and self._losses is not None
        # the simplex over the members: the others sit far below its threshold
        ascent = torch.where(self._member > 0, self.p + self.lr * self._losses,
                             torch.full_like(self.p, -1e9))
        new = project_simplex(ascent)
        self.p = new if round.ok is None else torch.where(round.ok, new, self.p)

    def param_groups(self):
        return [{"params": [], "lr": self.lr, "player": self.name}]

    def state_dict(self):
        return {"p": self.p.clone(), "lr": self.lr.clone()}

    def load_state_dict(self, state) -> None:
        self.p = state["p"].clone()
        self.lr.copy_(state["lr"])


def _problem() -> Problem:
    a, b = group("group", "0"), group("group", "1")
    gap = true_positive_rate(b) - true_positive_rate(a)
    return Problem(error_rate(), [(gap >= -0.05).named("tpr")])


def _game(ds, helpers, plugin: bool, lr: float = 0.5):
    torch.manual_seed(0)
    model = torch.nn.Linear(ds.features.shape[1], 1)
    players = [GroupAdversary("group", 1, lr=lr)] if plugin else []
    copt = ConstrainedOptimizer(_problem(), torch.optim.SGD(model.parameters(), lr=0.1),
                                preset="lagrangian", players=players)
    fields = helpers.fields(ds)
    fields["example_ids"] = torch.arange(ds.features.shape[0])
    return model, copt, fields


def _run(model, copt, ds, fields, steps: int) -> None:
    for _ in range(steps):
        copt.step_batch(model, ds.features, **fields)


@pytest.fixture(scope="module")
def small(synthetic):
    return dataclasses.replace(synthetic, features=synthetic.features[:400],
                               labels=synthetic.labels[:400],
                               groups={"group": synthetic.groups["group"][:400]})


def test_a_plugin_player_changes_the_trajectory(small, helpers):
    plain = _game(small, helpers, plugin=False)
    adv = _game(small, helpers, plugin=True)
    _run(*plain[:2], small, plain[2], 40)
    _run(*adv[:2], small, adv[2], 40)
    lam_plain, lam_adv = plain[1].weights()[1], adv[1].weights()[1]
    theta_gap = (plain[0].weight - adv[0].weight).detach().abs().max()
    assert float(theta_gap) > 1e-3
    assert not torch.equal(lam_plain, lam_adv)
    p = adv[1].player("adversary").p
    members = small.groups["group"] == 1
    assert float(p[~members].abs().sum()) == 0.0 and abs(float(p.sum()) - 1.0) < 1e-5
    assert float(p.max()) > 2.0 / int(members.sum())      # it moved off the uniform start


def test_the_fused_pass_sees_the_transform(small, helpers):
    model, copt, fields = _game(small, helpers, plugin=True)
    _run(model, copt, small, fields, 5)
    adv = copt.player("adversary")
    p = adv.p.clone()           # the weights the next step's transform applies
    with torch.no_grad():
        pred = (model(small.features)[:, 0] > 0).numpy()
    _run(model, copt, small, fields, 1)
    y = small.labels.numpy() == 1
    g = small.groups["group"].numpy()
    w = np.where(g == 1, (g == 1).sum() * p.numpy(), 1.0)
    err = np.sum(w * (pred != y)) / np.sum(w)
    tpr_b = np.sum(w * (pred & y & (g == 1))) / np.sum(w * (y & (g == 1)))
    leaves = copt.last.leaves_true.tolist()
    np.testing.assert_allclose(float(copt.last.objective_true), err, rtol=1e-5)
    assert any(abs(v - tpr_b) < 1e-5 for v in leaves), (leaves, tpr_b)


def test_its_step_size_is_a_parameter_group_a_scheduler_drives(small, helpers):
    model, copt, fields = _game(small, helpers, plugin=True, lr=0.8)
    groups = {g.get("player"): g for g in copt.param_groups}
    assert set(groups) == {"theta", "multipliers", "adversary"}
    assert groups["adversary"]["lr"] is copt.player("adversary").lr
    sched = torch.optim.lr_scheduler.StepLR(copt, step_size=2, gamma=0.5)
    for _ in range(4):
        _run(model, copt, small, fields, 1)
        sched.step()
    assert float(copt.player("adversary").lr) == pytest.approx(0.2)
    assert model is not None and float(groups["theta"]["lr"]) == pytest.approx(0.025)


def test_its_state_survives_a_state_dict_round_trip_bit_for_bit(small, helpers):
    model, copt, fields = _game(small, helpers, plugin=True)
    _run(model, copt, small, fields, 7)
    saved = (copy.deepcopy(copt.state_dict()), copy.deepcopy(model.state_dict()))
    _run(model, copt, small, fields, 6)
    want = (copt.state_dict(), [p.clone() for p in model.parameters()])

    model2, copt2, _ = _game(small, helpers, plugin=True)
    _run(model2, copt2, small, fields, 1)      # give the adversary its shapes, then overwrite
    model2.load_state_dict(saved[1])
    copt2.load_state_dict(saved[0])
    _run(model2, copt2, small, fields, 6)
    got = copt2.state_dict()
    assert torch.equal(got["players"]["adversary"]["p"], want[0]["players"]["adversary"]["p"])
    assert torch.equal(got["players"]["multipliers"]["lam"],
                       want[0]["players"]["multipliers"]["lam"])
    for p, q in zip(model2.parameters(), want[1], strict=True):
        assert torch.equal(p, q)
