"""Predict with a finished run: ``python scripts/predict.py RUN_DIR --data new.csv --out
preds.csv [--solution recommended] [--seed 0] [--chunk-size 65536] [--keep id]``.

Reads ``--data`` (CSV or Parquet) chunk by chunk, applies the run's solution
(:func:`fairgames.load_run`) and writes one row per input row to ``--out`` (CSV): the
``--keep`` columns as they are, then ``predict_proba`` (``P(ŷ = 1)`` of the randomised
prediction for a binary target, the expected prediction for a real one) and ``predict`` (one
member drawn per row, seeded by ``--seed``; the model's own prediction for a deterministic
solution). A run on your own table (``data=table``) takes raw rows (its ``preprocess.json``
encodes them; the target column is not needed, the protected one only if it was a feature);
a run on a packaged data set takes the encoded feature columns ``run.json`` names. The
predictions go to a temporary file beside ``--out``, renamed over it once every row is
written: ``--out`` may name ``--data`` itself (the input is read to its end first), and a
failure leaves neither a partial output nor a changed input. Exit status 1 when the run, the
data or the output cannot be used (the message says why), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pandas as pd
import torch

from fairgames.data import DataError
from fairgames.data.table import CSV_SUFFIXES, PARQUET_SUFFIXES
from fairgames.train.deploy.load import RunFormatError, load_run
from fairgames.train.deploy.predictor import Predictor
from fairgames.train.files import OutputError, atomic_file

SOLUTIONS = ("recommended", "best_iterate", "final", "stochastic")


def chunks(path: Path, size: int) -> Iterator[pd.DataFrame]:
    """``path``'s rows, ``size`` at a time (CSV through pandas, Parquet through pyarrow)."""
    name = path.name.lower()
    if not path.is_file():
        raise DataError(f"the data file {path} does not exist")
    if name.endswith(PARQUET_SUFFIXES):
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches(batch_size=size):
            yield batch.to_pandas()
    elif name.endswith(CSV_SUFFIXES):
        yield from _csv_chunks(path, sep="\t" if name.endswith(".tsv") else ",", size=size)
    else:
        raise DataError(f"the data file {path} has no known suffix; use a CSV {CSV_SUFFIXES} "
                        f"or a Parquet file {PARQUET_SUFFIXES}")


def _csv_chunks(path: Path, sep: str, size: int) -> Iterator[pd.DataFrame]:
    """A CSV's chunks; an empty file or one that does not parse is a :class:`DataError`
    naming it (pandas' own errors name neither the file nor the row)."""
    try:
        yield from pd.read_csv(path, sep=sep, chunksize=size)
    except pd.errors.EmptyDataError as e:
        raise DataError(f"the data file {path} is empty (no header, no rows): give a CSV "
                        "with a header line and one row per example") from e
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise DataError(f"the data file {path} cannot be parsed as CSV ({e}): check its "
                        "separator (',' for .csv, tab for .tsv), quoting and encoding "
                        "(UTF-8)") from e


def inputs(predictor: Predictor, frame: pd.DataFrame, features: Sequence[str] | None
           ) -> pd.DataFrame | torch.Tensor:
    """What the predictor takes: raw rows (a table run), else the encoded feature columns."""
    if predictor.preprocessor is not None:
        return frame
    if not features:
        raise DataError("the run's run.json names no feature columns: predict in Python "
                        "with fairgames.load_run(...) on encoded features")
    missing = [c for c in features if c not in frame.columns]
    if missing:
        raise DataError(f"the data lacks the run's feature column(s) {missing[:8]}; a run on a "
                        f"packaged data set takes its encoded features {list(features)[:8]}...")
    try:
        values = frame[list(features)].to_numpy(dtype="float32")
    except (TypeError, ValueError) as e:    # e.g. a text cell in an encoded feature column
        raise DataError(f"the run's feature columns must be numbers: {e}") from e
    return torch.as_tensor(values)


def predict_file(run_dir: Path, data: Path, out: Path, solution: str = "recommended",
                 seed: int = 0, chunk_size: int = 65536, keep: Sequence[str] = ()) -> int:
    """Write the predictions of ``run_dir``'s ``solution`` on ``data`` to ``out``; the row
    count."""
    run = load_run(run_dir)
    predictor = run.solutions[solution]
    generator = torch.Generator(predictor.weights.device).manual_seed(seed)
    rows, header = 0, True
    # written beside --out and renamed over it at the end: never opened over the input,
    # never left partial (an error below removes the temporary file)
    with atomic_file(out, "w", newline="", elsewhere="or give --out a writable place") as f:
        for frame in chunks(data, chunk_size):
            if frame.empty:                 # a header-only CSV's one chunk: no rows
                continue
            lacking = [c for c in keep if c not in frame.columns]
            if lacking:
                raise DataError(f"--keep names column(s) {lacking} that {data} lacks")
            try:
                x = inputs(predictor, frame, run.record.get("features"))
                table = frame[list(keep)].copy()
                table["predict_proba"] = predictor.predict_proba(x).cpu().numpy()
                table["predict"] = predictor.predict(x, generator=generator).cpu().numpy()
            except DataError as e:
                raise DataError(f"{data}, rows {rows + 1}-{rows + len(frame)}: {e}; nothing "
                                f"was written to {out}") from e
            table.to_csv(f, header=header, index=False)
            rows, header = rows + len(frame), False
        if rows == 0:
            raise DataError(f"the data file {data} has a header but no rows: nothing to "
                            "predict")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="a finished run's directory")
    parser.add_argument("--data", type=Path, required=True, help="rows to predict (CSV/Parquet)")
    parser.add_argument("--out", type=Path, required=True, help="the predictions (CSV)")
    parser.add_argument("--solution", choices=SOLUTIONS, default="recommended")
    parser.add_argument("--seed", type=int, default=0, help="seeds a mixture's draws")
    parser.add_argument("--chunk-size", type=int, default=65536, help="rows per chunk")
    parser.add_argument("--keep", nargs="*", default=[], help="input columns to copy over")
    args = parser.parse_args(argv)
    if args.chunk_size < 1:
        parser.error("--chunk-size must be a positive number of rows")
    try:
        rows = predict_file(args.run_dir, args.data, args.out, args.solution, args.seed,
                            args.chunk_size, args.keep)
    except (RunFormatError, DataError, OutputError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{args.out}: {rows} rows predicted by the {args.solution} solution of {args.run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
