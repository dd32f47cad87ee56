"""Apply a saved balanced filter to new rows: ``python scripts/apply_filter.py RUN_DIR --data
new.csv --out kept.csv [--seed 0]``.

``RUN_DIR`` is a directory ``scripts/filter.py`` wrote. Its ``filter.json`` is loaded and checks
the columns it is applied to; a filter fitted on your own table (``data=table``) takes raw rows
and encodes them with the training preprocessing (``preprocess.json``), one fitted on a
packaged data set takes the encoded feature columns ``filter.json`` names. ``--out`` receives the
rows Algorithm 2 keeps (one seeded draw), every input column as it was, plus
``acceptance_probability``; it is written whole or not at all, and may name ``--data`` itself.
Exit status 1 when the run or the data cannot be used (the message says why), 2 for bad
arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from fairgames.data import DataError, TablePreprocessor
from fairgames.data.table import read_table
from fairgames.filtering import BalancedFilter, FilterError
from fairgames.train.data import PREPROCESS_FILE
from fairgames.train.files import OutputError, atomic_file

FILTER_FILE = "filter.json"


def features(run_dir: Path, f: BalancedFilter, frame: pd.DataFrame) -> np.ndarray:
    """The filter's inputs for ``frame``: raw rows encoded with the run's preprocessing, else
    the encoded feature columns the filter was fitted on."""
    path = run_dir / PREPROCESS_FILE
    if path.is_file():
        try:
            pre = TablePreprocessor.from_dict(json.loads(path.read_text()))
        except (json.JSONDecodeError, DataError, KeyError, TypeError) as e:
            raise DataError(f"{path} is damaged ({e}): run scripts/filter.py again") from e
        if pre.feature_names != f.feature_names_in_:
            raise FilterError(f"{path} does not encode the features {FILTER_FILE} was fitted on "
                              "(another run's preprocessing?): run scripts/filter.py again")
        return pre.transform(frame).numpy().astype(np.float64)
    missing = [c for c in f.feature_names_in_ or [] if c not in frame.columns]
    if missing:
        raise DataError(f"the data lacks the filter's feature column(s) {missing[:8]}: a "
                        "filter fitted on a packaged data set takes its encoded columns")
    return frame[f.feature_names_in_].to_numpy(dtype=np.float64)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a directory scripts/filter.py wrote")
    parser.add_argument("--data", type=Path, required=True, help="CSV or Parquet rows")
    parser.add_argument("--out", type=Path, required=True, help="CSV of the kept rows")
    parser.add_argument("--seed", type=int, default=0, help="the draw's seed")
    args = parser.parse_args(argv)
    try:
        f = BalancedFilter.load(args.run_dir / FILTER_FILE)
        frame = read_table(args.data)
        if frame.empty:
            raise DataError(f"the data file {args.data} has no rows")
        x = features(args.run_dir, f, frame)
        p, kept = f.acceptance_probabilities(x), f.filter(x, seed=args.seed)
        out = frame.iloc[kept].assign(acceptance_probability=p[kept])
        with atomic_file(args.out, elsewhere="or give --out another place") as handle:
            out.to_csv(handle, index=False)
    except (FilterError, DataError, OutputError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"kept {len(kept)} of {len(frame)} rows (expected {p.mean():.2%}) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
