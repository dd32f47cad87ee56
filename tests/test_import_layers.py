"""The algebra imports light: ``fairgames.rates`` and ``fairgames.game`` load torch, numpy and
scipy (and tqdm) only — never the engine's Hydra, pandas, matplotlib or TensorBoard — and no
lower layer imports a higher one (train → game → rates)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

ALLOWED = ("torch", "numpy", "scipy", "tqdm")


def _new_top_level_modules(preload: tuple[str, ...], target: str) -> set[str]:
    """Top-level packages that importing ``target`` adds beyond ``preload`` (fresh process)."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {list(preload)!r}: importlib.import_module(name)\n"
        "import scipy.optimize, scipy.stats, scipy.special\n"
        "before = {m.split('.')[0] for m in sys.modules}\n"
        f"importlib.import_module({target!r})\n"
        "after = {m.split('.')[0] for m in sys.modules}\n"
        "print(json.dumps(sorted(after - before)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("package", ["fairgames.rates", "fairgames.game"])
def test_the_algebra_imports_only_torch_numpy_scipy_and_the_standard_library(package):
    added = _new_top_level_modules(ALLOWED, package)
    foreign = sorted(m for m in added - {"fairgames"}
                     if m not in sys.stdlib_module_names and not m.startswith("_"))
    assert foreign == [], f"importing {package} loads {foreign} beyond {ALLOWED}"


def test_the_check_catches_a_heavy_import():
    # the same probe, on a module that does load pandas: the allow-list would refuse it
    added = _new_top_level_modules(ALLOWED, "fairgames.train")
    assert "pandas" in added or "hydra" in added or "omegaconf" in added


@pytest.mark.parametrize("lower, higher", [("fairgames.rates", "fairgames.game"),
                                           ("fairgames.rates", "fairgames.train"),
                                           ("fairgames.game", "fairgames.train")])
def test_imports_point_down_the_flow(lower, higher):
    code = (f"import sys, {lower}\n"
            f"print(any(m == {higher!r} or m.startswith({higher + '.'!r}) "
            "for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False", f"importing {lower} loads {higher}"
