"""Intersecting groups (paper 002, Appendix A.2): z is several attributes at once (e.g.
race × sex), and a data set is balanced when EVERY attribute's marginal is (Def 15:
``Pr[z[g_ij] = 1] = 1/k_i``) — not the joint distribution.

Each row's z becomes a multi-hot vector over ``K = Σ_i k_i`` groups (one block per attribute,
one 1 per block); the posterior table ``A[j, k] = Pr[z[k] = 1 | ẑ = j]`` holds marginals
(each block of a row sums to 1); the target is ``U_intersect = (1/k_1, …, 1/k_1, …, 1/k_G,
…, 1/k_G)`` and the imbalance ``‖marginals − U_intersect‖₂`` (Def 16). Algorithm 1's QP,
Lemma 2 and the (α, β)-tree's constraints ``|Pr[z[k] = 1 | h, leaf] − r_k| ≤ α`` (one per
column) carry over unchanged with the multi-hot matrix in place of the one-hot one.

Example:
    >>> import numpy as np
    >>> Z = np.array([["a", "m"], ["b", "f"], ["a", "f"]], dtype=object)
    >>> g = Intersecting.fit(Z, ["race", "sex"], 3)
    >>> g.names, g.target().tolist()
    (['race=a', 'race=b', 'sex=f', 'sex=m'], [0.5, 0.5, 0.5, 0.5])
    >>> g.members(Z).tolist()[0], g.joint(Z).tolist()
    ([1.0, 0.0, 0.0, 1.0], [1, 2, 0])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import FilterError


def is_intersecting(z: Any) -> bool:
    """Whether ``z`` holds several attributes (a 2-d table with more than one column)."""
    shape = getattr(z, "shape", None)
    if shape is None:
        shape = np.asarray(z, dtype=object).shape
    return len(shape) == 2 and shape[1] > 1


def as_table(z: Any) -> tuple[np.ndarray, list[str] | None]:
    """``z`` as an (n × G) object array and its column names (a DataFrame's)."""
    names = [str(c) for c in z.columns] if hasattr(z, "columns") else None
    table = z.to_numpy(dtype=object) if hasattr(z, "to_numpy") else np.asarray(z, dtype=object)
    return table, names


@dataclass(frozen=True)
class Intersecting:
    """The attributes (``attributes``), each one's sorted values (``values``)."""

    attributes: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]

    @classmethod
    def fit(cls, Z: np.ndarray, attributes: Sequence[str] | None, n_rows: int
            ) -> Intersecting:
        """The structure of ``Z`` (n × G); each attribute needs two values at least."""
        Z = np.asarray(Z, dtype=object)
        if len(Z) != n_rows:
            raise FilterError(f"X has {n_rows} rows but z has {len(Z)}: give one row of the "
                              "protected attributes per row of X")
        names = tuple(attributes) if attributes else tuple(f"z{i}" for i in range(Z.shape[1]))
        values = []
        for i, name in enumerate(names):
            v = sorted(set(Z[:, i].tolist()), key=str)
            if len(v) < 2:
                raise FilterError(f"the protected attribute {name!r} takes one value only "
                                  f"({v}): each intersecting attribute needs two groups at "
                                  "least; drop that column of z")
            values.append(tuple(v))
        return cls(names, tuple(values))

    @property
    def sizes(self) -> list[int]:
        """``k_i``, the groups of each attribute."""
        return [len(v) for v in self.values]

    @property
    def names(self) -> list[str]:
        """The K column names, ``attribute=value``, block by block."""
        return [f"{a}={v}" for a, vs in zip(self.attributes, self.values, strict=True)
                for v in vs]

    def target(self) -> np.ndarray:
        """``U_intersect``: ``1/k_i`` on every group of attribute i (A.2)."""
        return np.concatenate([np.full(k, 1.0 / k) for k in self.sizes])

    def codes(self, Z: np.ndarray) -> np.ndarray:
        """Each row's value index per attribute (n × G); an unseen value is refused."""
        Z = np.asarray(Z, dtype=object)
        if Z.ndim != 2 or Z.shape[1] != len(self.attributes):
            raise FilterError(f"z has shape {Z.shape} but the filter was fitted on "
                              f"{len(self.attributes)} attributes {list(self.attributes)}: "
                              "give one column per attribute, in that order")
        out = np.empty(Z.shape, dtype=np.int64)
        for i, vs in enumerate(self.values):
            index = {v: j for j, v in enumerate(vs)}
            unknown = sorted({v for v in Z[:, i].tolist() if v not in index}, key=str)
            if unknown:
                raise FilterError(f"z's attribute {self.attributes[i]!r} holds values the "
                                  f"filter was not fitted on: {unknown[:10]}; fit on a sample "
                                  f"holding every group ({list(vs)})")
            out[:, i] = [index[v] for v in Z[:, i].tolist()]
        return out

    def members(self, Z: np.ndarray) -> np.ndarray:
        """The multi-hot matrix (n × K): one 1 per attribute block."""
        c = self.codes(Z)
        offsets = np.cumsum([0, *self.sizes[:-1]])
        M = np.zeros((len(c), sum(self.sizes)))
        for i, off in enumerate(offsets):
            M[np.arange(len(c)), off + c[:, i]] = 1.0
        return M

    def joint(self, Z: np.ndarray) -> np.ndarray:
        """Each row's joint group (mixed-radix index): what a baseline proxy predicts."""
        c = self.codes(Z)
        out = np.zeros(len(c), dtype=np.int64)
        for i, k in enumerate(self.sizes):
            out = out * k + c[:, i]
        return out

    @property
    def n_joint(self) -> int:
        return int(np.prod(self.sizes))

    def to_dict(self) -> dict[str, Any]:
        return {"attributes": list(self.attributes), "values": [list(v) for v in self.values]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Intersecting:
        return cls(tuple(d["attributes"]), tuple(tuple(v) for v in d["values"]))


def members(z: np.ndarray, n_groups: int) -> np.ndarray:
    """The group-membership matrix (n × K): one-hot of codes ``z`` (1-d), or ``z`` itself when
    it is already a (multi-hot) matrix."""
    z = np.asarray(z)
    return z.astype(np.float64) if z.ndim == 2 else np.eye(n_groups)[z]
