"""Saving and loading a fitted :class:`~fairgames.filtering.BalancedFilter` as ONE JSON file:
its parameters, the frozen proxy's arrays (as lists; float64 round-trips exactly through
JSON), ρ and the fitted tables. No pickle: the file is readable, diffable, and loading it
runs no code. The write is atomic (a temporary name in the same directory, then
``os.replace``), so a reader sees the old file or the new one, never half of one.

Example:
    >>> import tempfile, numpy as np
    >>> from pathlib import Path
    >>> from fairgames.filtering import BalancedFilter
    >>> rng = np.random.default_rng(0); z = rng.integers(0, 2, 400)
    >>> X = rng.normal(size=(400, 3)) + z[:, None]
    >>> f = BalancedFilter("qp_tree").fit(X, z, feature_names=["a", "b", "c"])
    >>> path = Path(tempfile.mkdtemp()) / "filter.json"
    >>> f.save(path)
    >>> g = BalancedFilter.load(path)
    >>> bool((g.acceptance_probabilities(X) == f.acceptance_probabilities(X)).all())
    True
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .errors import FilterError
from .intersect import Intersecting
from .proxies import proxy_from_dict
from .qp import Sampling

FORMAT = "fairgames.filtering.BalancedFilter/1"


def _write_atomic(path: Path, text: str) -> None:
    # the run files' writer (temporary name, fsync, rename); imported here, not at the top:
    # importing fairgames.filtering loads numpy and scipy only
    from fairgames.train.files import write_text

    write_text(path, text, elsewhere="or save the filter elsewhere")


def to_dict(f: Any) -> dict[str, Any]:
    s: Sampling = f.sampling_
    return {
        "format": FORMAT, "params": _params(f),
        "groups": f.groups_.tolist(), "feature_names": f.feature_names_in_,
        "n_features": f.n_features_in_, "proxy": f.proxy_.to_dict(),
        "posterior": f.posterior_.tolist(), "cell_mass": f.cell_mass_.tolist(),
        "prior": f.prior_.tolist(),
        "intersect": None if getattr(f, "intersect_", None) is None else f.intersect_.to_dict(),
        "sampling": {"rho": s.rho.tolist(), "q": s.q.tolist(), "acceptance": s.acceptance,
                     "distribution": s.distribution.tolist(), "distance": s.distance,
                     "exact": s.exact, "dropped": list(s.dropped), "method": s.method},
    }


def _params(f: Any) -> dict[str, Any]:
    """The constructor's arguments as JSON values (a numpy scalar or array becomes Python's)."""
    p = f.get_params()
    floor = None if p["min_acceptance"] is None else float(p["min_acceptance"])
    return p | {"eta": float(p["eta"]), "target": f.target_.tolist(), "min_acceptance": floor,
                "relaxed": bool(p["relaxed"]), "random_state": int(p["random_state"]),
                "alpha": float(p["alpha"]),
                "tree_options": None if p["tree_options"] is None else dict(p["tree_options"])}


def save(f: Any, path: Path) -> None:
    """Write ``f`` to ``path`` (its directory must exist)."""
    _write_atomic(path, json.dumps(to_dict(f), indent=1) + "\n")


def load(cls: type, path: Path) -> Any:
    """The filter saved at ``path``."""
    try:
        d = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise FilterError(f"cannot read a saved filter from {path} ({err}): give the path "
                          "BalancedFilter.save wrote") from err
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise FilterError(f"{path} is not a saved BalancedFilter (format "
                          f"{d.get('format') if isinstance(d, dict) else None!r}, expected "
                          f"{FORMAT!r}): give the path BalancedFilter.save wrote")
    f = cls(**d["params"])
    f.groups_ = np.asarray(d["groups"])
    f.n_groups_, f.target_ = len(f.groups_), np.asarray(d["params"]["target"], dtype=float)
    f.feature_names_in_, f.n_features_in_ = d["feature_names"], int(d["n_features"])
    f.proxy_ = proxy_from_dict(d["proxy"])
    f.intersect_ = None if d.get("intersect") is None else Intersecting.from_dict(d["intersect"])
    f.posterior_, f.cell_mass_, f.prior_ = (np.asarray(d[k], dtype=np.float64)
                                            for k in ("posterior", "cell_mass", "prior"))
    s = d["sampling"]
    f.sampling_ = Sampling(np.asarray(s["rho"]), np.asarray(s["q"]), float(s["acceptance"]),
                           np.asarray(s["distribution"]), float(s["distance"]),
                           bool(s["exact"]), tuple(s["dropped"]), s["method"])
    return f
