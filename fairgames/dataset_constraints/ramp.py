"""The ramp randomised classifier and its convex upper bounds (paper 001, Section 4).

A linear score z = ⟨w, x⟩ − b is turned into a randomised classifier that predicts positive
with probability σ(z) = clip(1/2 + z, 0, 1) (the ramp). Its expected positive and negative
rates on a weighted set of examples are r_p = Σ_i a_i σ(z_i) and r_n = Σ_i b_i σ(−z_i)
(σ(−z) = 1 − σ(z): the probability of a negative prediction). They are continuous but not
convex; majorization–minimization (:mod:`.mm`) replaces each σ by a convex upper bound tight
at the current score z′:

* σ̌_p(z; z′) = max{0, 1/2 + z} if z′ ≤ 1/2, else 1 — bounds σ(z);
* σ̌_n(z; z′) = σ̌_p(−z; −z′) = max{0, 1/2 − z} if z′ ≥ −1/2, else 1 — bounds σ(−z).

This is the notes' formula (../shared/notes/paper-001-dataset-constraints.md), checked against
the maths rather than copied: σ(z) ≤ max{0, 1/2 + z} everywhere (the ramp is that hinge
clipped at 1) and σ(z) ≤ 1; at z′ ≤ 1/2 the hinge equals σ(z′) (1/2 + z′ ≤ 1, so no clipping),
at z′ > 1/2 σ(z′) = 1 equals the constant. So the bound majorises σ and is tight at z′; σ̌_n
bounds the *negative* ramp σ(−z), which is what a negative rate sums, by the same argument
applied to −z. The tests check both on random (z, z′) against numpy.

Example:
    >>> import numpy as np
    >>> ramp(np.array([-1.0, 0.0, 0.25, 2.0])).tolist()
    [0.0, 0.5, 0.75, 1.0]
    >>> bound_p(np.array([0.25, 0.25]), np.array([0.0, 0.9])).tolist()
    [0.75, 1.0]
"""

from __future__ import annotations

import numpy as np

__all__ = ["bound_n", "bound_p", "ramp", "ramp_rates"]


def ramp(z: np.ndarray) -> np.ndarray:
    """σ(z) = clip(1/2 + z, 0, 1): the ramp classifier's probability of predicting positive.

    Example:
        >>> float(ramp(np.array([0.1]))[0])
        0.6
    """
    return np.clip(0.5 + np.asarray(z, dtype=float), 0.0, 1.0)


def bound_p(z: np.ndarray, z_ref: np.ndarray) -> np.ndarray:
    """σ̌_p(z; z′): max{0, 1/2 + z} where z′ ≤ 1/2, 1 elsewhere — convex in z, ≥ σ(z), equal
    to σ(z′) at z = z′.

    Example:
        >>> bound_p(np.array([3.0]), np.array([0.0])).tolist()    # the hinge, above σ = 1
        [3.5]
    """
    z, z_ref = np.asarray(z, dtype=float), np.asarray(z_ref, dtype=float)
    return np.where(z_ref <= 0.5, np.maximum(0.0, 0.5 + z), 1.0)


def bound_n(z: np.ndarray, z_ref: np.ndarray) -> np.ndarray:
    """σ̌_n(z; z′) = σ̌_p(−z; −z′): the bound of σ(−z) (a negative prediction's probability).

    Example:
        >>> bound_n(np.array([0.25]), np.array([0.0])).tolist()
        [0.25]
    """
    return bound_p(-np.asarray(z, dtype=float), -np.asarray(z_ref, dtype=float))


def ramp_rates(z: np.ndarray, pos: np.ndarray, neg: np.ndarray) -> float:
    """Σ_i pos_i σ(z_i) + neg_i σ(−z_i): a positive combination of the ramp's expected
    positive and negative rates (``pos = 1/|D|`` on D's rows gives r_p(D)).

    Example:
        >>> ramp_rates(np.array([0.0, 1.0]), np.array([0.5, 0.5]), np.zeros(2))
        0.75
    """
    return float(pos @ ramp(z) + neg @ ramp(-np.asarray(z, dtype=float)))
