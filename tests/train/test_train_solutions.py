"""The LP mixture's repair for ratios of rates
(fairgames.train.results.solutions.repair_lp_mixture):
the LP mixes F-measures linearly, the true F-measure of a mixture is a ratio of mixed counts."""

import warnings

import numpy as np
import pytest
import torch

from fairgames.game.solutions import shrink_lp
from fairgames.train.results.solutions import REPAIR_STEPS, repair_lp_mixture

# Confusion counts (tp, fp, fn) of three candidates on two groups. Candidate 0 alone meets
# F_a ≤ F_b; the LP over the candidates' F values mixes 0 and 1.
COUNTS = np.array([[[18, 69, 20], [33, 58, 17]],
                   [[100, 67, 22], [37, 64, 32]],
                   [[63, 94, 36], [20, 28, 51]]], dtype=np.float64)


def fmeasure(c):
    tp, fp, fn = c
    return 2 * tp / (2 * tp + fp + fn)


def exact_for(counts):
    def exact(w):
        """Objective −F(all) and the row F_a − F_b of the mixture ``w``, from mixed counts."""
        mix = np.tensordot(np.asarray(w, dtype=np.float64), counts, axes=1)
        return -fmeasure(mix.sum(0)), [fmeasure(mix[0]) - fmeasure(mix[1])]
    return exact


exact = exact_for(COUNTS)


def test_an_lp_mixture_that_violates_a_ratio_constraint_is_moved_to_feasibility():
    f = [exact(np.eye(3)[r])[0] for r in range(3)]
    g = [exact(np.eye(3)[r])[1] for r in range(3)]
    lp = torch.as_tensor(shrink_lp(f, g), dtype=torch.float64)
    assert float(np.dot(lp.numpy(), [row[0] for row in g])) <= 1e-9   # feasible in the LP
    assert exact(lp)[1][0] > 0.05                                      # not in truth
    w, t = repair_lp_mixture(lp, 0, g[0], exact)
    assert exact(w)[1][0] <= 0.0
    assert t is not None and 0 < t < 1            # strictly between: not the best iterate
    assert torch.allclose(w, (1 - t) * lp + t * torch.eye(3, dtype=torch.float64)[0])
    assert exact(w)[0] < f[0]                      # a better objective than the best iterate
    # the smallest feasible step on the 1/20 grid: one step less is infeasible
    back = (1 - (t - 1 / REPAIR_STEPS)) * lp + (t - 1 / REPAIR_STEPS) * torch.eye(3)[0].double()
    assert exact(back)[1][0] > 0.0 or exact(back)[0] > exact(w)[0]


def test_no_repair_where_the_lp_is_exact_or_no_candidate_is_feasible():
    linear = lambda w: (float(w @ torch.tensor([1.0, 0.0], dtype=torch.float64)),  # noqa: E731
                        [float(w @ torch.tensor([1.0, -1.0], dtype=torch.float64))])
    lp = torch.tensor([0.5, 0.5], dtype=torch.float64)             # on the boundary: exact
    w, t = repair_lp_mixture(lp, 1, [-1.0], linear)
    assert t is None and w is lp
    infeasible = torch.tensor([1.0, 0.0], dtype=torch.float64)
    w, t = repair_lp_mixture(infeasible, 1, [0.3], lambda w: (0.0, [0.5]))
    assert t is None and w is infeasible


@pytest.mark.parametrize("seed", [0, 1])
def test_the_repaired_mixture_is_never_worse_than_the_best_iterate(seed):
    """Feasible-first comparison on the selection split: the repaired mixture is feasible and
    its objective is at most the (feasible) best iterate's."""
    rng = np.random.default_rng(seed)
    repaired = 0
    for _ in range(200):
        ex = exact_for(rng.integers(1, 100, size=(4, 2, 3)).astype(np.float64))
        f = [ex(np.eye(4)[r])[0] for r in range(4)]
        g = [ex(np.eye(4)[r])[1] for r in range(4)]
        feasible = [r for r in range(4) if g[r][0] <= 0]
        if not feasible:
            continue
        best = min(feasible, key=lambda r: f[r])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            lp = torch.as_tensor(shrink_lp(f, g), dtype=torch.float64)
        w, t = repair_lp_mixture(lp, best, g[best], ex)
        repaired += t is not None
        assert ex(w)[1][0] <= 1e-6 and ex(w)[0] <= f[best] + 1e-12
    assert repaired > 0            # the property was exercised on repaired mixtures too
