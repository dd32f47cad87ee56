"""Loading a finished run for use: :func:`load_run` (also ``fairgames.load_run``).

Every run directory carries ``run.json`` (written when the run starts): the run directory's
format and version, which :func:`load_run` checks, and what applying its models needs — the
label kind, the feature names, the protected attribute and whether it is a feature, and the
table preprocessing file (``preprocess.json``, own table data only). Each solution file
(``recommended.pt``, ``best_iterate.pt``, ``final.pt``, ``stochastic.pt``) records its model
settings (:func:`fairgames.models.build_model`'s arguments), from which the architecture is
rebuilt; a run of your own module (:func:`fairgames.train.fit`) has none: pass ``model=`` a
module of the same architecture.

Example:
    >>> import tempfile, torch
    >>> from fairgames.data import make_synthetic
    >>> from fairgames.models import build_model
    >>> from fairgames.train import fit
    >>> d = tempfile.mkdtemp()
    >>> splits = make_synthetic(n=300, d=3, seed=0)
    >>> _ = fit(build_model("linear", 3), "error", splits, protected="group",
    ...         trainer={"steps": 4, "bootstrap": 0, "plots": False}, run_dir=d)
    >>> run = load_run(d, model=build_model("linear", 3))
    >>> sorted(run.solutions), run.recommended.predict_proba(splits.test.features).shape
    (['best_iterate', 'final', 'recommended', 'stochastic'], torch.Size([60]))
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fairgames.data import DataError, DatasetSplits, TablePreprocessor
from fairgames.game.solutions import load_solution
from fairgames.models import GridRounded, build_model, decision_threshold

from ..data import PREPROCESS_FILE, load_splits
from ..files import write_text
from .contract import check_features
from .predictor import Predictor

RUN_FILE = "run.json"
RUN_FORMAT, RUN_VERSION = "fairgames.run", 1
RESULTS_FILE = "results.json"
SOLUTION_FILES = {"recommended": "recommended.pt", "best_iterate": "best_iterate.pt",
                  "final": "final.pt", "stochastic": "stochastic.pt"}


class RunFormatError(ValueError):
    """A directory :func:`load_run` cannot read: not a run, an unfinished one, or one written
    by another version of fairgames; the message says which and what to do."""


def run_record(splits: DatasetSplits, protected: str) -> dict[str, Any]:
    """``run.json``'s content for a run on ``splits``.

    Example:
        >>> from fairgames.data import make_synthetic
        >>> rec = run_record(make_synthetic(n=100, d=2, seed=0), "group")
        >>> rec["format"], rec["version"], rec["features"], rec["preprocess"]
        ('fairgames.run', 1, ['x0', 'x1'], None)
    """
    train, meta = splits.train, splits.metadata or {}
    pre = meta.get("preprocessor")
    return {"format": RUN_FORMAT, "version": RUN_VERSION, "label_kind": train.label_kind,
            "data": meta.get("name", "custom"), "protected": protected,
            "protected_is_feature": bool(pre.include_protected) if pre is not None else None,
            "features": list(train.feature_names) if train.feature_names else None,
            "preprocess": PREPROCESS_FILE if pre is not None else None,
            "solutions": dict(SOLUTION_FILES)}


def write_run_record(run_dir: Path, splits: DatasetSplits, protected: str) -> Path:
    """Write ``run.json`` into ``run_dir`` (:func:`run_record`)."""
    path = Path(run_dir) / RUN_FILE
    write_text(path, json.dumps(run_record(splits, protected), indent=1) + "\n")
    return path


def read_run_record(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """``run.json`` of ``run_dir``, its format and version checked.

    Raises:
        RunFormatError: no ``run.json`` (not a run directory, or one written before run
            directories carried a version), another format, or a newer version.
    """
    path = Path(run_dir) / RUN_FILE
    if not path.is_file():
        raise RunFormatError(
            f"{run_dir} has no {RUN_FILE}: it is not a fairgames run directory, or one written "
            f"by a fairgames version older than the run-directory format {RUN_VERSION}; point "
            "load_run at the directory a run wrote (run_dir=...), or train it again")
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise RunFormatError(f"{path} cannot be read ({e}): the run directory is damaged") from e
    if not isinstance(record, dict) or record.get("format") != RUN_FORMAT:
        raise RunFormatError(f"{path} is not a fairgames run record (format "
                             f"{record.get('format') if isinstance(record, dict) else None!r})")
    version = record.get("version")
    if not isinstance(version, int) or version > RUN_VERSION or version < 1:
        raise RunFormatError(
            f"{path} has run-directory format version {version!r}; this fairgames reads "
            f"version {RUN_VERSION}: load it with the fairgames version that wrote it (its "
            "results.json env.fairgames), or upgrade fairgames")
    return record


@dataclass
class LoadedRun:
    """A finished run, loaded: its solutions as :class:`Predictor` modules.

    Attributes:
        run_dir: the directory.
        record: ``run.json``; ``results``: ``results.json``.
        solutions: ``{"recommended" | "best_iterate" | "final" | "stochastic": Predictor}``.
        preprocessor: the table preprocessing (``None`` unless own table data).
    """

    run_dir: Path
    record: dict[str, Any]
    results: dict[str, Any]
    solutions: dict[str, Predictor] = field(default_factory=dict)
    preprocessor: TablePreprocessor | None = None

    @property
    def recommended(self) -> Predictor:
        """The solution the run recommends deploying (``results["training"]["recommended"]``
        says what it is and why)."""
        return self.solutions["recommended"]

    @property
    def best_iterate(self) -> Predictor:
        return self.solutions["best_iterate"]

    @property
    def final(self) -> Predictor:
        return self.solutions["final"]

    @property
    def stochastic(self) -> Predictor:
        return self.solutions["stochastic"]

    @property
    def config(self) -> dict[str, Any]:
        """The run's config as ``results.json`` records it."""
        return self.results["config"]

    def data_splits(self) -> DatasetSplits:
        """The run's data again, split as it was (a run of :func:`fairgames.train.fit` on your
        own splits cannot: its data config names no loader).

        Raises:
            DataError: the data now encodes to other feature columns than the run's models
                read, or the same ones in another order (e.g. a table file rewritten with
                its columns moved): :func:`~fairgames.train.deploy.contract.check_features`.
        """
        splits = load_splits(self.config["data"], self.config["seed"])
        check_features(self.record.get("features"), splits.train.feature_names,
                       f"the run in {self.run_dir}")
        return splits


def load_run(run_dir: str | os.PathLike[str], *, model: nn.Module | None = None,
             device: torch.device | str = "cpu") -> LoadedRun:
    """Load the finished run in ``run_dir``: its recommended, best-iterate, final and
    stochastic solutions as :class:`Predictor` modules on ``device``.

    ``model``: a module of the run's architecture (its values are ignored), needed only for a
    run of your own module (:func:`fairgames.train.fit`), whose files name no model settings.

    Raises:
        RunFormatError: not a run directory, a format version this fairgames cannot read, an
            unfinished run (no ``results.json``: resume it), or a file of the run missing,
            empty or damaged (``results.json``, ``preprocess.json``, a solution file): the
            message names it and says to resume the run or train it again.
    """
    root = Path(run_dir)
    record = read_run_record(root)
    results_path = root / RESULTS_FILE
    if not results_path.is_file():
        raise RunFormatError(f"{root} holds no {RESULTS_FILE}: the run has not finished; "
                             f"resume it (python scripts/train.py trainer.resume={root})")
    results = _read_json(results_path, root)
    pre = None
    if record.get("preprocess"):
        pre_path = root / record["preprocess"]
        try:
            pre = TablePreprocessor.from_dict(_read_json(pre_path, root))
        except DataError as e:       # readable JSON, but not a preprocessing record
            raise RunFormatError(f"{pre_path} cannot be used ({e}): {_remedy(root)}") from e
    run = LoadedRun(root, record, results, preprocessor=pre)
    for name, file in record["solutions"].items():
        path = root / file
        if not path.is_file():
            raise RunFormatError(f"{path} is missing: the run directory is incomplete; "
                                 f"{_remedy(root)}")
        problem = _archive_problem(path)
        if problem is not None:
            raise RunFormatError(f"{path} cannot be read: {problem}; {_remedy(root)}")
        try:
            run.solutions[name] = _predictor(path, name, record, pre, model, device)
        except RunFormatError:
            raise
        except Exception as e:   # noqa: BLE001 (torch raises many kinds on a bad file)
            raise RunFormatError(f"{path} cannot be read ({type(e).__name__}: {e}): "
                                 f"{_remedy(root)}") from e
    return run


def _remedy(root: Path) -> str:
    """How to get a run directory's outputs back: resume it while its checkpoint is there (the
    run's outputs are written again at its end), else train it again."""
    if any((root / n).is_file() for n in ("checkpoint.pt", "checkpoint.prev.pt")):
        return (f"resume the run to write its outputs again (python scripts/train.py "
                f"trainer.resume={root}), or train it again (its command with overwrite=true)")
    return (f"train the run again (its command with run_dir={root} overwrite=true; it has no "
            "checkpoint to resume)")


def _read_json(path: Path, root: Path) -> Any:
    """A run file's JSON; an empty, cut-short or unreadable file named with the remedy."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise RunFormatError(f"{path} cannot be read ({e}): {_remedy(root)}") from e
    if not text.strip():
        raise RunFormatError(f"{path} is empty ({len(text)} bytes), e.g. a copy cut short or a "
                             f"full disk: {_remedy(root)}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise RunFormatError(f"{path} is damaged (not valid JSON: {e}): {_remedy(root)}") from e


def _archive_problem(path: Path) -> str | None:
    """What is wrong with a solution file as a PyTorch zip archive; ``None``: its records
    pass their CRC-32 checksums (a flipped bit in a tensor's bytes does not)."""
    size = path.stat().st_size
    if size == 0:
        return "the file is empty (0 bytes)"
    if not zipfile.is_zipfile(path):
        return (f"the file is truncated or damaged ({size} bytes, no zip directory), e.g. a "
                "copy cut short or a full disk")
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        return f"the file is damaged ({type(e).__name__}: {e})"
    return None if bad is None else f"the file is damaged (its record {bad!r} fails its checksum)"


def _predictor(path: Path, name: str, record: Mapping[str, Any],
               pre: TablePreprocessor | None, model: nn.Module | None,
               device: torch.device | str) -> Predictor:
    """One solution file as a :class:`Predictor` (the architecture from its metadata)."""
    meta = torch.load(path, map_location="cpu", weights_only=True).get("metadata", {})
    template = model if model is not None else _template(path, meta.get("model"))
    if meta.get("rounded_to_grid") is not None and not isinstance(template, GridRounded):
        template = GridRounded(template, int(meta["rounded_to_grid"]))   # algorithm=reduction
    solution = load_solution(path, template, device)
    features = record.get("features")
    return Predictor(solution, label_kind=record["label_kind"],
                     decision=decision_threshold(template), preprocessor=pre, name=name,
                     input_dim=len(features) if features else None)


def _template(path: Path, settings: Mapping[str, Any] | None) -> nn.Module:
    if not settings:
        raise RunFormatError(f"{path} names no model settings: the run trained your own module "
                             "(fairgames.train.fit); pass load_run(..., model=<a module of the "
                             "same architecture>)")
    return build_model(**settings)
