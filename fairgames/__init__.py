"""fairgames: train PyTorch models under rate constraints, as a game.

The subpackages are imported on use (``fairgames.rates`` stays light: torch, numpy and scipy
only). ``fairgames.load_run`` is loaded on first access (it pulls in the training engine).

Example:
    >>> import fairgames
    >>> fairgames.load_run.__module__
    'fairgames.train.deploy.load'
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_run"]


def __getattr__(name: str) -> Any:
    if name == "load_run":
        from fairgames.train.deploy.load import load_run

        return load_run
    raise AttributeError(f"module 'fairgames' has no attribute {name!r}")
