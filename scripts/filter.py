"""Balanced filtering from the command line (paper 002): ``python scripts/filter.py
[overrides]``, e.g.::

    python scripts/filter.py data=adult data.protected=race filter.proxy=qp_tree filter.eta=0.3
    python scripts/filter.py -m filter.eta=0,0.1,0.2,0.3 seed=0,1,2

Fits a :class:`fairgames.filtering.BalancedFilter` on the training split (a proxy of the
protected attribute z from the other features), keeps a balanced sample of it, and reports
the disclosivity, imbalance and acceptance on train and test. Outputs go to the run directory
(``runs/...``, ``multirun/...`` for ``-m``, or ``run_dir=``): ``filter.json`` (the saved filter:
``scripts/apply_filter.py`` applies it to new rows), ``metrics.json``, ``kept.csv``,
``posterior.png`` (the heat map of Pr[z | ẑ]) and, for your own table, ``preprocess.json``
(:mod:`fairgames.filtering.pipeline`). Config errors exit with status 2, a missing or damaged
data file or a refused write with 1, each with one message.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from fairgames.data import DataError
from fairgames.filtering.errors import FilterError
from fairgames.filtering.pipeline import fit_filter, summary_lines, write_outputs
from fairgames.train import ConfigError
from fairgames.train.cli import HYDRA_ERRORS, one_message
from fairgames.train.files import OutputError
from fairgames.train.run_dir import RunDirError, check_free, claim

CONFIGS = str(Path(__file__).resolve().parents[1] / "configs")
FINISHED = "metrics.json"      # what a finished filter run leaves in its directory


@hydra.main(config_path=CONFIGS, config_name="filter", version_base="1.3")
def main(cfg: DictConfig) -> float:
    run_dir = Path(cfg.run_dir or HydraConfig.get().runtime.output_dir)
    config = OmegaConf.to_container(cfg, resolve=True)
    try:
        run = fit_filter(config)
        with claim(run_dir):        # decided under the lock: two runs cannot both pass
            check_free(run_dir, overwrite=bool(cfg.overwrite), resuming=False,
                       finished=FINISHED, resumable=False)
            write_outputs(run, run_dir, config)
    except (FilterError, ConfigError, RunDirError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except (DataError, OutputError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    print("\n".join([f"{run_dir}:", *summary_lines(run)]))
    # what a sweeper minimises: the imbalance the filter leaves on train, in expectation
    return float(run.reports["train"]["imbalance_expected"])


if __name__ == "__main__":
    one_message(main, (*HYDRA_ERRORS, FilterError, ConfigError))
