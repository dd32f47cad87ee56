"""Input checks of the balanced filter: each failure a :class:`FilterError` naming the problem
and the remedy.

Example:
    >>> import numpy as np
    >>> check_eta(0.3)
    0.3
    >>> X, names = check_features(np.zeros((3, 2)), None)
    >>> X.shape, names
    ((3, 2), None)
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import FilterError

PROXIES = ("naive_regression", "naive_tree", "qp_regression", "qp_tree", "alpha_beta",
           "relaxed")
TREES = ("alpha_beta", "relaxed")  # the (α, β)-proxies of Algorithms 3–4


def check_eta(eta: float) -> float:
    """η of the interpolation (paper 002 A.1.1): a probability."""
    if isinstance(eta, bool) or not (isinstance(eta, numbers.Real) and 0.0 <= float(eta) <= 1.0):
        raise FilterError(f"eta must lie in [0, 1] (got {eta!r}): it is the probability of "
                          "re-assigning the proxy's cell uniformly (0: the proxy as fitted, "
                          "1: no proxy at all)")
    return float(eta)


def check_alpha(alpha: float) -> float:
    """α of the (α, β)-proxy: the largest distance of a leaf's row from the base rates."""
    if isinstance(alpha, bool) or not (isinstance(alpha, numbers.Real)
                                       and 0.0 <= float(alpha) <= 1.0):
        raise FilterError(f"alpha must lie in [0, 1] (got {alpha!r}): it bounds how far a "
                          "leaf's group shares may lie from the base rates (0: no split, "
                          "1: no bound)")
    return float(alpha)


TREE_OPTIONS = ("gamma", "beta_stop", "max_height", "min_leaf", "T", "lambda_max", "eps",
                "lemma3", "relaxed_tests")


def check_tree_options(options: Any) -> dict[str, Any]:
    """The (α, β)-tree's settings (:func:`fairgames.filtering.abtree.fit_alpha_beta`)."""
    if options is None:
        return {}
    unknown = sorted(set(dict(options)) - set(TREE_OPTIONS))
    if unknown:
        raise FilterError(f"unknown tree options {unknown}: the (α, β)-tree takes "
                          f"{list(TREE_OPTIONS)} (fairgames.filtering.abtree.fit_alpha_beta)")
    return dict(options)


def check_proxy(proxy: str, cells: str, min_acceptance: float | None) -> None:
    """A known proxy, a cell kind it has, and a floor only where ρ comes from the QP."""
    if proxy not in PROXIES:
        raise FilterError(f"unknown proxy {proxy!r}: choose one of {', '.join(PROXIES)}")
    if cells not in ("predicted", "leaves"):
        raise FilterError(f"unknown cells {cells!r}: choose 'predicted' (the predicted group) "
                          "or 'leaves' (a tree's leaves, with proxy='qp_tree')")
    if cells == "leaves" and proxy not in ("qp_tree", *TREES):
        raise FilterError(f"cells='leaves' needs proxy='qp_tree' (got {proxy!r}; the cells "
                          "of 'alpha_beta' and 'relaxed' are always their leaves): the naive "
                          "proxies sample per predicted group, a regression has no leaves")
    if min_acceptance is not None and proxy.startswith("naive"):
        raise FilterError(f"min_acceptance applies to the QP proxies (got proxy={proxy!r}): "
                          "a naive proxy's acceptance rate is fixed by its cell masses; use "
                          "'qp_regression' or 'qp_tree', or drop min_acceptance")


def check_intersecting_proxy(proxy: str) -> None:
    """Intersecting groups (A.2) need ρ from Algorithm 1: the naive rule samples the same
    count of every predicted group, which balances no marginal."""
    if proxy.startswith("naive"):
        raise FilterError(f"proxy {proxy!r} cannot balance intersecting groups (z with several "
                          "attributes): its equal count per predicted group balances no "
                          "attribute's marginal; use 'qp_regression', 'qp_tree', "
                          "'alpha_beta' or 'relaxed'")


def check_features(X: Any, names: Sequence[str] | None
                   ) -> tuple[np.ndarray, list[str] | None]:
    """``X`` as a float64 matrix, and its column names (a DataFrame's, else ``names``)."""
    if hasattr(X, "columns"):
        names = [str(c) for c in X.columns]
        X = X.to_numpy(dtype=np.float64)
    x = np.asarray(X, dtype=np.float64)
    if x.ndim != 2:
        raise FilterError(f"X must be a 2-d table (rows × features), got shape {x.shape}: "
                          "reshape a single row with X[None, :]")
    if names is not None and len(names) != x.shape[1]:
        raise FilterError(f"{len(names)} feature names for {x.shape[1]} columns of X: give "
                          "one name per column")
    bad = np.flatnonzero(~np.isfinite(x).all(0))
    if bad.size:
        cols = [names[j] if names else f"column {j}" for j in bad[:5]]
        raise FilterError(f"X holds NaN or infinite values in {', '.join(cols)}"
                          f"{' ...' if bad.size > 5 else ''}: impute them or drop those rows "
                          "before fitting or filtering")
    return x, list(names) if names is not None else None


def check_columns(expected: list[str] | None, width: int, names: list[str] | None,
                  got_width: int) -> None:
    """The columns given at apply time are those the filter was fitted on, in order."""
    if expected is not None and names is not None and names != expected:
        missing = [c for c in expected if c not in names]
        extra = [c for c in names if c not in expected]
        order = "" if missing or extra else " (the same names in another order)"
        raise FilterError(
            f"the columns of X do not match the filter's{order}: missing {missing[:10]}, "
            f"unexpected {extra[:10]}; give the columns the filter was fitted on, in its order "
            "(filter.feature_names_in_): X[filter.feature_names_in_] for a DataFrame")
    if got_width != width:
        raise FilterError(f"X has {got_width} columns but the filter was fitted on {width}: "
                          "give the same features, built with the same preprocessing")


def check_groups(z: Any, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``z``'s distinct values (sorted) and its codes 0..K−1; two values at least."""
    z = np.asarray(z).reshape(-1)
    if len(z) != n_rows:
        raise FilterError(f"X has {n_rows} rows but z has {len(z)}: give one value of the "
                          "protected attribute per row of X")
    groups, codes = np.unique(z, return_inverse=True)
    if len(groups) < 2:
        raise FilterError(f"z takes one value only ({groups.tolist()}): balancing needs at "
                          "least two groups; check that z is the protected attribute of "
                          "the whole sample, not of one group")
    return groups, codes.astype(np.int64)


def codes_of(z: Any, groups: np.ndarray, n_rows: int) -> np.ndarray:
    """``z``'s codes among the fitted ``groups``; an unknown value is refused."""
    z = np.asarray(z).reshape(-1)
    if len(z) != n_rows:
        raise FilterError(f"X has {n_rows} rows but z has {len(z)}: give one value of the "
                          "protected attribute per row of X")
    unknown = sorted(set(np.unique(z).tolist()) - set(groups.tolist()))
    if unknown:
        raise FilterError(f"z holds values the filter was not fitted on: {unknown[:10]}; fit "
                          f"on a sample holding every group ({groups.tolist()})")
    return np.searchsorted(groups, z).astype(np.int64)
