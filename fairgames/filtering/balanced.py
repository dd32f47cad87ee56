"""``BalancedFilter``: paper 002's filter in the scikit-learn idiom — ``fit`` a proxy of the
protected attribute z on a small labelled sample, then ``filter`` a stream whose z is never
seen, keeping a sample balanced in z (or distributed as any ``target``).

The life cycle, and what each step computes (paper 002, §4–5):

* ``fit(X, z)``: fit the proxy (:mod:`.proxies`), its soft cells ``W`` (η-interpolated), the
  posterior table ``A`` and masses ``r̂`` on the fitted sample (:mod:`.metrics`), then ρ by
  Algorithm 1 (``qp_*``) or the equal-count rule (``naive_*``) (:mod:`.qp`);
* ``acceptance_probabilities(X)``: ``W(x)·ρ`` per row; ``filter(X)``: Algorithm 2, the kept
  indices (:mod:`.sampler`); ``stream()``: the same, one row at a time;
* ``report(X, z)``: the metrics on a sample with known z (in-sample on the fitted one,
  out-of-sample on another); ``save`` / ``load``: one JSON file (:mod:`.store`).

X never holds z's own columns nor the label y: the proxy is fitted on what X holds, so leave
them out (:func:`fairgames.filtering.data.filter_arrays` does for the packaged data sets).

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> z = rng.choice(3, size=3000, p=[0.7, 0.2, 0.1])
    >>> X = rng.normal(size=(3000, 4)) + np.eye(3, 4)[z]           # the features carry z
    >>> f = BalancedFilter(proxy="qp_tree", eta=0.0, random_state=0).fit(X, z)
    >>> kept = f.filter(X)
    >>> r = f.report(X, z)
    >>> r["imbalance_expected"] < r["imbalance_base"]
    True
    >>> bool(np.isclose(r["acceptance_expected"], f.sampling_.acceptance))
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import checks, metrics, store
from .errors import FilterError
from .intersect import Intersecting, as_table, is_intersecting
from .proxies import Proxy, fit_proxy, proxy_memberships
from .qp import Sampling, check_distribution, equal_count_probabilities, sampling_for_total
from .sampler import Stream, keep_indices


class BalancedFilter:
    """A balanced filter through a proxy (paper 002's baselines).

    Args:
        proxy: ``"naive_regression"``, ``"naive_tree"`` (the same expected count of every
            predicted group), ``"qp_regression"`` or ``"qp_tree"`` (ρ by Algorithm 1), or
            ``"alpha_beta"``: the (α, β)-proxy, a tree of randomised splits learned by
            Algorithms 3–4 (:mod:`.abtree`), its leaves the cells, ρ by Algorithm 1; or
            ``"relaxed"``: §5's relaxed (α, β)-proxy, the same tree grown against the cone
            of the leaves' rows (Algorithm 1 without ``Σq = 1``) and ρ by that relaxation,
            normalised (:func:`~fairgames.filtering.abtree.cone_projection`).
        eta: the interpolation η ∈ [0, 1] (A.1.1): the probability that the proxy's cell is
            re-assigned uniformly over its range; 1 removes the proxy (disclosivity 0).
        target: the kept distribution aimed at, one share per group in the sorted order of
            z's values; ``None``: uniform.
        min_acceptance: a floor on the expected acceptance rate (``qp_*`` only).
        cells: ``"predicted"`` (the predicted group) or ``"leaves"`` (``qp_tree``'s leaves).
        relaxed: Algorithm 1 without ``Σq = 1`` (§5's relaxation, normalised).
        random_state: the seed of the tree and of the filter's draws.
        alpha: ``alpha_beta`` / ``relaxed`` only: every leaf's group shares lie within α of
            the base rates.
        tree_options: ``alpha_beta`` / ``relaxed`` only: the settings of
            :func:`~fairgames.filtering.abtree.fit_alpha_beta` (``gamma``, ``beta_stop``,
            ``max_height``, ``min_leaf``, ``T``, ``lambda_max``, ``eps``, ``lemma3``).
    """

    def __init__(self, proxy: str = "qp_tree", eta: float = 0.0, target: Sequence[float] |
                 None = None, min_acceptance: float | None = None, cells: str = "predicted",
                 relaxed: bool = False, random_state: int = 0, alpha: float = 0.1,
                 tree_options: Mapping[str, Any] | None = None) -> None:
        self.proxy, self.eta, self.target = proxy, eta, target
        self.min_acceptance, self.cells, self.relaxed = min_acceptance, cells, relaxed
        self.random_state, self.alpha, self.tree_options = random_state, alpha, tree_options

    def get_params(self) -> dict[str, Any]:
        """The constructor's arguments (the scikit-learn idiom; saved with the filter)."""
        return {k: getattr(self, k) for k in ("proxy", "eta", "target", "min_acceptance",
                                              "cells", "relaxed", "random_state", "alpha",
                                              "tree_options")}

    def fit(self, X: Any, z: Any, *, feature_names: Sequence[str] | None = None
            ) -> BalancedFilter:
        """Fit the proxy and ρ on a sample with known z. ``X``: a DataFrame (its column names
        are kept and checked on apply) or a matrix (``feature_names`` optional).

        Raises:
            FilterError: a bad ``eta``, proxy, cells or floor; NaN in X; a z of one value or
                of another length than X; a target that is not a distribution.
        """
        eta = checks.check_eta(self.eta)
        checks.check_proxy(self.proxy, self.cells, self.min_acceptance)
        x, names = checks.check_features(X, feature_names)
        self.intersect_: Intersecting | None = None
        if is_intersecting(z):   # several attributes: Appendix A.2
            checks.check_intersecting_proxy(self.proxy)
            table, attributes = as_table(z)
            self.intersect_ = Intersecting.fit(table, attributes, len(x))
            groups, codes = np.asarray(self.intersect_.names), self.intersect_.members(table)
            self.target_ = self._intersect_target()
        else:
            groups, codes = checks.check_groups(z, len(x))
            self.target_ = check_distribution(self.target, len(groups))
        self.groups_, self.n_groups_ = groups, len(groups)
        self.feature_names_in_, self.n_features_in_ = names, x.shape[1]
        self.proxy_: Proxy = self._fit_proxy(x, codes, z)
        W = proxy_memberships(self.proxy_, x, eta)
        self.posterior_, self.cell_mass_ = metrics.posterior_table(W, codes, len(groups))
        self.prior_ = metrics.group_shares(codes, len(groups))
        self.sampling_: Sampling = self._solve()
        return self

    def _intersect_target(self) -> np.ndarray:
        """``U_intersect`` (A.2), or the given target: one distribution per attribute block."""
        g = self.intersect_
        assert g is not None
        if self.target is None:
            return g.target()
        u = np.asarray(self.target, dtype=np.float64).reshape(-1)
        blocks = np.split(u, np.cumsum(g.sizes)[:-1]) if u.size == sum(g.sizes) else []
        if not blocks or any(not np.isclose(b.sum(), 1.0) or (b < 0).any() for b in blocks):
            raise FilterError(f"with intersecting groups the target is one distribution per "
                              f"attribute, {sum(g.sizes)} shares in blocks of {g.sizes} each "
                              f"summing to 1 (got {u.tolist()}): give the marginal shares in "
                              f"the order {g.names}, or None for U_intersect")
        return u

    def _fit_proxy(self, x: np.ndarray, codes: np.ndarray, z: Any) -> Proxy:
        if self.proxy in checks.TREES:  # the tree balances towards the filter's own target
            from .abtree import fit_alpha_beta
            options = checks.check_tree_options(self.tree_options)
            return fit_alpha_beta(x, codes, self.n_groups_, checks.check_alpha(self.alpha),
                                  target=self.target_, relaxed=self.proxy == "relaxed",
                                  **options)
        model = "regression" if self.proxy.endswith("regression") else "tree"
        if self.intersect_ is not None:  # a baseline predicts the joint group (A.2)
            joint = self.intersect_.joint(as_table(z)[0])
            present, joint = np.unique(joint, return_inverse=True)
            return fit_proxy(model, x, joint, len(present), seed=self.random_state,
                             cells=self.cells)
        return fit_proxy(model, x, codes, self.n_groups_, seed=self.random_state,
                         cells=self.cells)

    def _solve(self) -> Sampling:
        if self.proxy.startswith("naive"):
            return equal_count_probabilities(self.posterior_, self.cell_mass_, self.target_)
        # the relaxed (α, β)-proxy takes Algorithm 1's relaxation too (§5, normalised);
        # with intersecting groups U_intersect sums to G, not 1 (A.2)
        return sampling_for_total(self.posterior_, self.cell_mass_, self.target_,
                                  min_acceptance=self.min_acceptance,
                                  relaxed=self.relaxed or self.proxy == "relaxed")

    def _check_fitted(self) -> None:
        if not hasattr(self, "sampling_"):
            raise FilterError("this BalancedFilter is not fitted: call fit(X, z) first, or "
                              "BalancedFilter.load(path) for a saved one")

    def _matrix(self, X: Any) -> np.ndarray:
        self._check_fitted()
        x, names = checks.check_features(X, None)
        checks.check_columns(self.feature_names_in_, self.n_features_in_, names, x.shape[1])
        return x

    def soft_cells(self, X: Any) -> np.ndarray:
        """``W(x)``: each row's expected membership of the proxy's cells (η-interpolated)."""
        x = self._matrix(X)
        return proxy_memberships(self.proxy_, x, float(self.eta))

    def acceptance_probabilities(self, X: Any) -> np.ndarray:
        """The probability that Algorithm 2 keeps each row: ``W(x)·ρ``."""
        return self.soft_cells(X) @ self.sampling_.rho

    def filter(self, X: Any, *, seed: int | None = None) -> np.ndarray:
        """Algorithm 2 on a batch: the indices of the kept rows (seeded: ``seed``, else
        ``random_state``; the same seed keeps the same rows, as ``stream`` does)."""
        rng = np.random.default_rng(self.random_state if seed is None else seed)
        return keep_indices(self.acceptance_probabilities(X), rng)

    def stream(self, *, seed: int | None = None) -> FilterStream:
        """Algorithm 2 one row at a time: ``s = f.stream(); s.accept(row) -> bool``."""
        self._check_fitted()
        return FilterStream(self, np.random.default_rng(
            self.random_state if seed is None else seed))

    def report(self, X: Any, z: Any, *, seed: int | None = None) -> dict[str, Any]:
        """The metrics on a sample with known z: see :func:`.report.filter_report`."""
        from .report import filter_report
        x = self._matrix(X)
        if self.intersect_ is not None:
            table = as_table(z)[0]
            if len(table) != len(x):
                raise FilterError(f"X has {len(x)} rows but z has {len(table)}: give one row "
                                  "of the protected attributes per row of X")
            codes = self.intersect_.members(table)
        else:
            codes = checks.codes_of(z, self.groups_, len(x))
        return filter_report(self, x, codes, self.filter(x, seed=seed), seed)

    def save(self, path: str | Path) -> None:
        """Write the fitted filter as one JSON file, atomically (:mod:`.store`)."""
        self._check_fitted()
        store.save(self, Path(path))

    @classmethod
    def load(cls, path: str | Path) -> BalancedFilter:
        """A filter written by :meth:`save`; it checks the columns it is applied to."""
        return store.load(cls, Path(path))


class FilterStream:
    """Algorithm 2 on a stream: ``accept(row)`` keeps a row with probability ``W(x)·ρ``.
    A row is a sequence of the features in the fitted order, or a mapping from their names."""

    def __init__(self, fitted: BalancedFilter, rng: np.random.Generator) -> None:
        self.filter = fitted
        self._stream = Stream(rng)

    def accept(self, row: Any) -> bool:
        f = self.filter
        if isinstance(row, Mapping):
            if f.feature_names_in_ is None:
                raise FilterError("a row given as a mapping needs a filter fitted with feature "
                                  "names: fit on a DataFrame or pass feature_names=")
            missing = [c for c in f.feature_names_in_ if c not in row]
            if missing:
                raise FilterError(f"the row lacks the filter's columns {missing[:10]}: give "
                                  "every feature the filter was fitted on")
            row = [row[c] for c in f.feature_names_in_]
        p = f.acceptance_probabilities(np.asarray(row, dtype=np.float64)[None, :])[0]
        return self._stream.accept_probability(float(p))

    @property
    def seen(self) -> int:
        return self._stream.seen

    @property
    def kept(self) -> int:
        return self._stream.kept
