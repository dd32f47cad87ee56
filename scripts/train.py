"""Train from the command line: ``python scripts/train.py [overrides]``.

With no override this is a quick, real job (``configs/train.yaml``: equal opportunity on
Adult by sex, a linear model, the proxy-Lagrangian). Examples::

    python scripts/train.py problem=fmeasure_parity data=compas trainer.steps=2000
    python scripts/train.py problem=kld_error algorithm=algorithm2
    python scripts/train.py -m problem.tolerance=0.01,0.02,0.05 seed=0,1,2
    python scripts/train.py trainer.resume=runs/<date>/<time>_<problem>_<data>

Outputs go to the run directory (``runs/...``, or ``multirun/...`` for ``-m``): the resolved
config (``.hydra/``), TensorBoard events, ``results.json``, ``report.md``, ``dynamics.png``,
``final.pt`` / ``best_iterate.pt`` / ``stochastic.pt`` (the solutions) and
``checkpoint.pt``. Config errors (unknown keys, bad values, a problem string
that does not parse) are reported in one message and exit with status 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import fairgames.train.config  # noqa: F401  (registers the config schema)
from fairgames.problems import ProblemError
from fairgames.train import ConfigError, run
from fairgames.train.verdict import verdict_lines

CONFIGS = str(Path(__file__).resolve().parents[1] / "configs")


@hydra.main(config_path=CONFIGS, config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    run_dir = cfg.run_dir or HydraConfig.get().runtime.output_dir
    try:
        result = run(cfg, run_dir=run_dir)
    except (ConfigError, ProblemError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    if result.results is None:
        print(f"stopped at step {result.engine.step}; resume with "
              f"trainer.resume={result.run_dir}")
        return None
    test = result.results["solutions"]["stochastic"]["test"]
    worst = max((c["violation"] or 0.0 for c in test["constraints"].values()), default=0.0)
    headline = ", ".join(f"{k} {test[k]:.4f}" for k in ("error", "mse", "mae") if k in test)
    print(f"{result.run_dir}: stochastic model on test: objective {test['objective']:.4f}, "
          f"{headline}, max violation {worst:.4f}")
    print("\n".join(verdict_lines(result.results["verdict"])))
    return test["objective"]


if __name__ == "__main__":
    main()
