"""A fitted filter's metrics on a sample with known z (paper 002 §5; the names say which
quantity is an expectation under ρ and which one realised draw):

* ``disclosivity``: ``max_{j,k} |Pr[z = k | ẑ = j] − Pr[z = k]|`` with the posterior table
  AND the prior of THIS sample (out of sample: the test table against the test prior, Def 5
  estimated on the test sample); ``disclosivity_fit_prior``: the same table against the prior
  of the fitted sample. Both with the η-interpolated cells (the post-processed labels, A.1.1).
* ``imbalance_expected``: ``‖Pr[z | kept] − target‖₂`` with ``Pr[z = k | kept] ∝
  Σ_i p_i 1[z_i = k]``, ``p_i = W(x_i)·ρ``; ``imbalance_realised``: the same for the rows one
  seeded draw of Algorithm 2 kept; ``imbalance_base``: the sample's own (nothing filtered).
* ``acceptance_expected`` (mean ``p_i``) and ``acceptance_realised`` (kept / rows).
* ``cells``: per proxy cell, the rows whose proxy output it is (``rows``; before η), its mass
  after η (``mass``), ``rho``, the expected and the realised kept rows, its posterior row.

Example:
    >>> import numpy as np
    >>> from fairgames.filtering import BalancedFilter
    >>> rng = np.random.default_rng(1)
    >>> z = rng.choice(2, size=500, p=[0.8, 0.2]); X = rng.normal(size=(500, 2)) + z[:, None]
    >>> r = BalancedFilter("qp_regression").fit(X, z).report(X, z)
    >>> sorted(k for k in r if k.startswith("imbalance"))
    ['imbalance_base', 'imbalance_expected', 'imbalance_realised']
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import metrics


def filter_report(f: Any, x: np.ndarray, codes: np.ndarray, kept: np.ndarray,
                  seed: int | None) -> dict[str, Any]:
    """The report of fitted filter ``f`` on rows ``x`` with group codes ``codes``, given the
    rows one draw kept."""
    K = f.n_groups_
    hard = f.proxy_.cells(x)
    W = f.soft_cells(x)
    p = W @ f.sampling_.rho
    A, mass = metrics.posterior_table(W, codes, K)
    prior = metrics.group_shares(codes, K)
    expected = metrics.group_shares(codes, K, weights=p)
    realised = metrics.group_shares(codes[kept], K)
    kept_cells = np.bincount(hard[kept], minlength=f.proxy_.n_cells)
    cells = [{"cell": j, "rows": int((hard == j).sum()), "mass": float(mass[j]),
              "rho": float(f.sampling_.rho[j]), "kept_expected": float(W[:, j] @ p),
              "kept_realised_hard": int(kept_cells[j]), "posterior": A[j].tolist()}
             for j in range(f.proxy_.n_cells)]
    return {
        "rows": len(x), "groups": f.groups_.tolist(), "target": f.target_.tolist(),
        "proxy": f.proxy, "eta": float(f.eta), "seed": f.random_state if seed is None else seed,
        "disclosivity": metrics.disclosivity(A, prior, mass),
        "disclosivity_fit_prior": metrics.disclosivity(A, f.prior_, mass),
        "imbalance_expected": metrics.imbalance(expected, f.target_),
        "imbalance_realised": metrics.imbalance(realised, f.target_) if len(kept) else None,
        "imbalance_base": metrics.imbalance(prior, f.target_),
        "acceptance_expected": float(p.mean()), "acceptance_realised": len(kept) / len(x),
        "kept": len(kept), "distribution_expected": expected.tolist(),
        "distribution_realised": realised.tolist(), "prior": prior.tolist(),
        "group_counts": metrics.group_counts(codes, K).tolist(),
        "kept_group_counts": metrics.group_counts(codes[kept], K).tolist(),
        "dropped_cells": list(f.sampling_.dropped), "cells": cells,
    }
