"""The paper's baseline proxies (paper 002 §5): a multinomial logistic regression or a
decision tree that predicts z from the features, frozen into plain arrays so that a saved
filter needs no pickle and applies without scikit-learn's estimator objects.

A proxy maps a row to a **cell**: the predicted group (``cells="predicted"``, the paper's
"predicted group") or, for a tree, its leaf (``cells="leaves"``). The η-interpolation of the
paper's A.1.1 re-assigns the cell uniformly over the proxy's range with probability η; the
filter uses its expectation, the soft membership ``W(x) = (1 − η)·onehot(cell(x)) + η / L``
(a deployed proxy uses expected weights: the acceptance probability ``W(x)·ρ`` equals that
of drawing the re-assigned cell, then accepting).

Hyper-parameters, fixed before any run (the paper gives none):
``LogisticRegression(C=1.0, max_iter=1000)`` after ``StandardScaler`` (multinomial, lbfgs);
``DecisionTreeClassifier(max_depth=8, min_samples_leaf=50, random_state=seed)``.

Example:
    >>> import numpy as np
    >>> X = np.arange(200.0)[:, None]; z = (X[:, 0] >= 100).astype(int)
    >>> p = fit_proxy("tree", X, z, 2, seed=0)
    >>> p.cells(np.array([[3.0], [150.0]])).tolist(), p.n_cells
    ([0, 1], 2)
    >>> soft_cells(p.cells(X), p.n_cells, eta=0.5)[0].tolist()
    [0.75, 0.25]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .abtree import AlphaBetaProxy

LOGISTIC = {"C": 1.0, "max_iter": 1000}
TREE = {"max_depth": 8, "min_samples_leaf": 50}


@dataclass(frozen=True)
class LinearProxy:
    """Argmax of ``((x − mean) / scale) @ coef.T + intercept`` over the groups (a binary
    logistic regression has one row: group 1 where the score is positive)."""

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    n_cells: int

    def cells(self, X: np.ndarray) -> np.ndarray:
        s = ((X - self.mean) / self.scale) @ self.coef.T + self.intercept
        return (s[:, 0] > 0).astype(np.int64) if s.shape[1] == 1 else s.argmax(1)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "linear", "n_cells": self.n_cells,
                **{k: getattr(self, k).tolist() for k in ("mean", "scale", "coef", "intercept")}}


@dataclass(frozen=True)
class TreeProxy:
    """A fitted tree's arrays; ``cell_of_node`` maps each leaf to its cell (its predicted
    group, or its rank among the leaves). Splits compare float32 features, as scikit-learn
    does (``x ≤ threshold`` goes left)."""

    left: np.ndarray
    right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    cell_of_node: np.ndarray
    n_cells: int

    def leaves(self, X: np.ndarray) -> np.ndarray:
        x = np.asarray(X, dtype=np.float32)
        node = np.zeros(len(x), dtype=np.int64)
        rows = np.arange(len(x))
        while True:
            inner = self.left[node] >= 0
            if not inner.any():
                return node
            f, t = self.feature[node[inner]], self.threshold[node[inner]]
            go_left = x[rows[inner], f] <= t
            node[inner] = np.where(go_left, self.left[node[inner]], self.right[node[inner]])

    def cells(self, X: np.ndarray) -> np.ndarray:
        return self.cell_of_node[self.leaves(X)]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "tree", "n_cells": self.n_cells,
                **{k: getattr(self, k).tolist()
                   for k in ("left", "right", "feature", "threshold", "cell_of_node")}}


Proxy = LinearProxy | TreeProxy | AlphaBetaProxy


def proxy_from_dict(d: dict[str, Any]) -> Proxy:
    """The inverse of ``to_dict`` (a saved filter's proxy)."""
    if d["kind"] == "alpha_beta":
        return AlphaBetaProxy.from_dict(d)
    if d["kind"] == "linear":
        return LinearProxy(*(np.asarray(d[k], dtype=np.float64)
                             for k in ("mean", "scale", "coef", "intercept")), int(d["n_cells"]))
    ints = (np.asarray(d[k], dtype=np.int64) for k in ("left", "right", "feature"))
    return TreeProxy(*ints, np.asarray(d["threshold"], dtype=np.float64),
                     np.asarray(d["cell_of_node"], dtype=np.int64), int(d["n_cells"]))


def fit_proxy(model: str, X: np.ndarray, z: np.ndarray, n_groups: int, *, seed: int = 0,
              cells: str = "predicted") -> Proxy:
    """Fit ``"regression"`` or ``"tree"`` to predict the group codes ``z`` (0..K−1, every
    code present) and freeze it. scikit-learn is imported here only."""
    if model == "regression":
        from sklearn.linear_model import LogisticRegression
        mean, scale = X.mean(0), X.std(0)
        scale = np.where(scale > 0, scale, 1.0)  # StandardScaler's rule for constant columns
        lr = LogisticRegression(**LOGISTIC).fit((X - mean) / scale, z)
        return LinearProxy(mean, scale, lr.coef_.astype(np.float64),
                           lr.intercept_.astype(np.float64), n_groups)
    from sklearn.tree import DecisionTreeClassifier
    t = DecisionTreeClassifier(**TREE, random_state=seed).fit(X, z).tree_
    leaf = t.children_left < 0
    if cells == "leaves":
        cell = np.full(t.node_count, -1, dtype=np.int64)
        cell[leaf] = np.arange(int(leaf.sum()))
        n = int(leaf.sum())
    else:  # the tree's classes are 0..K−1 (every code present), so argmax is the code
        cell, n = t.value[:, 0, :].argmax(1).astype(np.int64), n_groups
    return TreeProxy(t.children_left.astype(np.int64), t.children_right.astype(np.int64),
                     t.feature.astype(np.int64), t.threshold.astype(np.float64), cell, n)


def soft_cells(cells: np.ndarray, n_cells: int, eta: float) -> np.ndarray:
    """The η-interpolated membership ``(1 − η)·onehot + η / L`` (paper 002 A.1.1, in
    expectation), one row per example."""
    w = np.full((len(cells), n_cells), eta / n_cells)
    w[np.arange(len(cells)), cells] += 1.0 - eta
    return w


def proxy_memberships(proxy: Proxy, X: np.ndarray, eta: float) -> np.ndarray:
    """Each row's η-interpolated membership of the proxy's cells: the one-hot cell of a hard
    proxy, the soft leaf weights of the (α, β)-tree (Def 10), mixed with ``η / L``."""
    if isinstance(proxy, AlphaBetaProxy):
        return (1.0 - eta) * proxy.memberships(X) + eta / proxy.n_cells
    return soft_cells(proxy.cells(X), proxy.n_cells, eta)
