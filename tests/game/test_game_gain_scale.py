"""The λ-player's step on a constraint over group losses is relative to its bound
(``Problem``'s ``gain_scale``): a loss has no range of its own, so without it the multipliers of
``E[ℓ | a] ≤ ζ`` moved with violations of ~0.002 and bounded group loss was not enforced on
Crime (issue 22). Rate rows keep scale 1 and no scale tensor at all (the golden trajectories)."""

from __future__ import annotations

import pytest
import torch

from fairgames.data import make_synthetic
from fairgames.game import ConstrainedOptimizer, Problem
from fairgames.rates import Loss, error_rate, group, group_loss, true_positive_rate


def _squared(times: float) -> Loss:
    return Loss(f"squared_x{times:g}", lambda s, y: times * 0.5 * (y - s) ** 2)


def test_loss_rows_scale_by_their_bound_and_rate_rows_have_no_scale():
    a = group("group", "0")
    p = Problem(group_loss("squared"), {"bgl": group_loss("squared", a) <= 0.02,
                                        "eq": group_loss("squared", a) == 0.04,
                                        "rate": error_rate(a) <= 0.3,
                                        "pair": group_loss("squared", a) <= group_loss("squared")})
    assert p.terms.row_names == ["bgl", "eq[<=]", "eq[>=]", "rate", "pair"]
    assert p.terms.gain_scale.tolist() == pytest.approx([50.0, 25.0, 25.0, 1.0, 1.0])
    rates_only = Problem(error_rate(), [true_positive_rate(a) >= 0.6])
    assert rates_only.terms.gain_scale is None


@pytest.mark.parametrize("preset", ["proxy_lagrangian", "lagrangian", "algorithm2"])
def test_the_multipliers_step_does_not_depend_on_the_losses_units(preset):
    """The same constraint in two units (ℓ ≤ ζ and 10ℓ ≤ 10ζ): from the same θ, the λ-player's
    first step is the same (before the scale, the second moved λ ten times as far)."""
    ds = make_synthetic(n=400, d=3, label_kind="real", label_noise=0.1, seed=1).train
    fields = {"labels": ds.labels, "groups": {"group": ds.groups["group"]},
              "group_values": {"group": ds.group_names["group"]}}
    played = []
    for times in (1.0, 10.0):
        torch.manual_seed(0)
        net = torch.nn.Linear(3, 1)
        loss = _squared(times)
        bound = times * 0.3 * float(0.5 * (ds.labels ** 2).mean())   # violated at the start
        p = Problem(group_loss(loss), [group_loss(loss, group("group", g)) <= bound
                                       for g in ds.group_names["group"]])
        copt = ConstrainedOptimizer(p, torch.optim.SGD(net.parameters(), lr=0.0), preset=preset)
        copt.step_batch(net, ds.features, **fields)
        copt.step_batch(net, ds.features, **fields)
        played.append(torch.cat([copt.last.objective_weight.reshape(1), copt.last.multipliers]))
    assert played[0].max() > 1e-2                       # λ moved
    torch.testing.assert_close(played[0], played[1], rtol=1e-4, atol=1e-6)
