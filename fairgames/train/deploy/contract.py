"""The saved-model contract: what a model trained by an earlier run needs from the data it is
applied to — the same feature columns in the same order (:func:`check_features`) and, for a
run on table data, the preprocessing that turned the table into those columns
(:func:`check_preprocess`). One implementation, used wherever a saved model meets new data:
a churn baseline (``problem.baseline_path``, :mod:`fairgames.train.helpers`).

A model multiplies column ``j`` of its input by its own weight ``j``: the same columns in
another order are accepted by torch (the width matches) and scored as if they were other
features, e.g. 89 % accurate as trained and 51 % as applied (issue 54, "silent numbers").

Example:
    >>> check_features(["age", "hours"], ["age", "hours"], "the baseline")
    >>> check_features(["age", "hours"], ["hours", "age"], "the baseline")
    Traceback (most recent call last):
    ...
    fairgames.data.errors.DataError: the baseline was trained on the same 2 feature columns \
in another order: column 0 is 'age' there but 'hours' here, column 1 is 'hours' there but \
'age' here; encode the data as the model was trained (the same data set, feature options and \
column order) or train the model again on this data
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fairgames.data import DataError

SHOWN = 5          # columns named in a message (the rest are counted)


def _names(items: Sequence[str]) -> str:
    shown = ", ".join(repr(x) for x in items[:SHOWN])
    more = len(items) - SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def check_features(expected: Sequence[str] | None, given: Sequence[str] | None,
                   what: str) -> None:
    """Refuse data whose feature columns are not the model's, in the model's order.

    ``expected``: the names the model was trained on (its run's ``run.json`` ``features``);
    ``given``: the data's (``TabularDataset.feature_names``); ``what``: the model in the
    message. Either ``None`` (names not recorded): nothing to check by name.

    Raises:
        DataError: columns missing from the data or not the model's (named), or the same
            columns in another order (the first positions that differ named).

    Example:
        >>> check_features(["a", "b"], ["a", "c"], "the model")
        Traceback (most recent call last):
        ...
        fairgames.data.errors.DataError: the model was trained on other feature columns than \
this data's: missing here 'b'; not the model's 'c' (2 columns there, 2 here); encode the data \
as the model was trained (the same data set, feature options and column order) or train the \
model again on this data
    """
    if expected is None or given is None:
        return
    expected, given = [str(x) for x in expected], [str(x) for x in given]
    if expected == given:
        return
    remedy = ("encode the data as the model was trained (the same data set, feature options "
              "and column order) or train the model again on this data")
    if sorted(expected) == sorted(given):
        moved = [f"column {i} is {a!r} there but {b!r} here"
                 for i, (a, b) in enumerate(zip(expected, given, strict=True)) if a != b]
        more = len(moved) - SHOWN
        listed = ", ".join(moved[:SHOWN]) + (f" and {more} more" if more > 0 else "")
        raise DataError(f"{what} was trained on the same {len(expected)} feature columns in "
                        f"another order: {listed}; {remedy}")
    have = set(given)
    missing = [x for x in expected if x not in have]
    want = set(expected)
    extra = [x for x in given if x not in want]
    parts = ([f"missing here {_names(missing)}"] if missing else []) + (
        [f"not the model's {_names(extra)}"] if extra else [])
    if not parts:      # the same set with repeats: report as another layout
        parts = ["the same names repeated differently"]
    raise DataError(f"{what} was trained on other feature columns than this data's: "
                    f"{'; '.join(parts)} ({len(expected)} columns there, {len(given)} here); "
                    f"{remedy}")


def check_preprocess(run_dir: str | Path, record: Mapping[str, Any], what: str) -> None:
    """Refuse a saved model of a run on table data whose preprocessing spec
    (``preprocess.json``, named by ``run.json``'s ``preprocess``) is not beside it: without
    it the model's columns cannot be rebuilt from a table.

    Raises:
        DataError: the file ``run.json`` names is missing (the message names it).

    Example:
        >>> check_preprocess(".", {"preprocess": None}, "the baseline")   # packaged data
    """
    name = record.get("preprocess")
    if name and not (Path(run_dir) / str(name)).is_file():
        raise DataError(f"{what} was trained on table data but its preprocessing spec "
                        f"{Path(run_dir) / str(name)} is missing: copy the run directory "
                        "whole (the model file with run.json and preprocess.json) or train "
                        "the model again")
