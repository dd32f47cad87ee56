"""Atomic checkpoints: written to a temporary file, then renamed over the old one.

A reader never sees a half-written checkpoint: ``os.replace`` is atomic on POSIX and Windows,
so a run killed while saving leaves the previous checkpoint intact. Checkpoints are loaded
with ``torch.load(weights_only=True)``: tensors and plain containers only, no pickled code.

Example:
    >>> import tempfile, torch
    >>> from pathlib import Path
    >>> path = Path(tempfile.mkdtemp()) / "checkpoint.pt"
    >>> save_atomic({"step": 3, "w": torch.ones(2)}, path)
    >>> load_checkpoint(path)["step"]
    3
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_NAME = "checkpoint.pt"


def save_atomic(state: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """``torch.save`` to ``path + ".tmp"`` then rename it to ``path``.

    Example:
        >>> import tempfile, torch
        >>> with tempfile.TemporaryDirectory() as d:
        ...     save_atomic({"step": 3, "w": torch.ones(2)}, Path(d) / CHECKPOINT_NAME)
        ...     print(sorted(p.name for p in Path(d).iterdir()))
        ['checkpoint.pt']
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def find_checkpoint(resume: bool | str, run_dir: Path | None) -> Path | None:
    """The checkpoint ``trainer.resume`` points at: ``true`` → the run directory's; a path →
    that file, or the ``checkpoint.pt`` in that directory; ``false`` → ``None``.

    Raises:
        FileNotFoundError: naming the path that holds no checkpoint.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     save_atomic({"step": 3}, Path(d) / CHECKPOINT_NAME)
        ...     print(find_checkpoint(True, Path(d)).name, find_checkpoint(False, Path(d)))
        checkpoint.pt None
    """
    if resume is False or resume is None:
        return None
    if resume is True:
        if run_dir is None:
            raise FileNotFoundError("trainer.resume=true needs a run directory (run_dir)")
        path = run_dir / CHECKPOINT_NAME
    else:
        path = Path(str(resume))
        if path.is_dir():
            path = path / CHECKPOINT_NAME
    if not path.is_file():
        raise FileNotFoundError(f"trainer.resume: no checkpoint at {path}")
    return path


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load a checkpoint on the CPU (tensors and plain containers only).

    Example:
        >>> import tempfile, torch
        >>> with tempfile.TemporaryDirectory() as d:
        ...     save_atomic({"step": 3, "w": torch.ones(2)}, Path(d) / "c.pt")
        ...     state = load_checkpoint(Path(d) / "c.pt")
        >>> state["step"], state["w"].tolist()
        (3, [1.0, 1.0])
    """
    with open(path, "rb") as f:
        return torch.load(f, map_location="cpu", weights_only=True)
