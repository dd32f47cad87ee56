"""The algebra imports light: ``fairgames.rates``, ``fairgames.game`` and the families' game
parts load torch, numpy and scipy (and tqdm) only — never the engine's Hydra, pandas,
matplotlib or TensorBoard —, no lower layer imports a higher one (train → game → rates), and
the core (``game/``, ``train/``) never imports a paper family's folder nor compares a value
with a family's name: a family plugs in through the seam (fairgames.train.method)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

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


@pytest.mark.parametrize("package", ["fairgames.rates", "fairgames.game",
                                     "fairgames.noisy_groups", "fairgames.fair_regression",
                                     "fairgames.filtering", "fairgames.dataset_constraints"])
def test_the_algebra_imports_only_torch_numpy_scipy_and_the_standard_library(package):
    added = _new_top_level_modules(ALLOWED, package)
    foreign = sorted(m for m in added - {"fairgames"}
                     if m not in sys.stdlib_module_names and not m.startswith("_"))
    assert foreign == [], f"importing {package} loads {foreign} beyond {ALLOWED}"


def test_the_check_catches_a_heavy_import():
    # the same probe, on a module that does load pandas: the allow-list would refuse it
    added = _new_top_level_modules(ALLOWED, "fairgames.train.run")
    assert "pandas" in added or "hydra" in added or "omegaconf" in added


@pytest.mark.parametrize("lower, higher", [("fairgames.rates", "fairgames.game"),
                                           ("fairgames.rates", "fairgames.train"),
                                           ("fairgames.game", "fairgames.train"),
                                           ("fairgames.game", "fairgames.noisy_groups"),
                                           ("fairgames.game", "fairgames.fair_regression"),
                                           ("fairgames.train", "fairgames.filtering"),
                                           ("fairgames.game", "fairgames.dataset_constraints")])
def test_imports_point_down_the_flow(lower, higher):
    code = (f"import sys, {lower}\n"
            f"print(any(m == {higher!r} or m.startswith({higher + '.'!r}) "
            "for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False", f"importing {lower} loads {higher}"


PACKAGE = Path(__file__).resolve().parents[1] / "fairgames"
# the core's top-level packages; every other one is a paper family's folder
CORE = {"rates", "game", "train", "data", "models", "problems", "baselines"}
FAMILIES = sorted(p.name for p in PACKAGE.iterdir()
                  if (p / "__init__.py").exists() and p.name not in CORE)


def _family_names() -> set[str]:
    """What the families register under a name: their methods, extensions, config groups, and
    their players' names (all that the core could compare a config value with)."""
    from fairgames.game.players.base import Player
    from fairgames.train.method import extensions, family_groups, methods

    names = {m.name for key in ("algorithm.name", "robust.name") for m in methods(key).values()}
    names |= {e.group for e in extensions()} | set(family_groups())
    for family in FAMILIES:
        for path in (PACKAGE / family).rglob("*.py"):
            module = __import__(".".join(path.relative_to(PACKAGE.parent).with_suffix("")
                                         .parts).removesuffix(".__init__"), fromlist=["_"])
            names |= {cls.name for cls in vars(module).values()
                      if isinstance(cls, type) and issubclass(cls, Player)
                      and cls.__module__ == module.__name__}
    return names


def _core_modules() -> list[Path]:
    return sorted(p for layer in ("game", "train") for p in (PACKAGE / layer).rglob("*.py"))


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants of a module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def test_there_are_family_folders_and_names_to_check():
    assert {"noisy_groups", "fair_regression"} <= set(FAMILIES)
    assert {"reduction", "soft_assignments_ideal", "robust", "dro",
            "soft_assignments"} <= _family_names()


def test_the_core_imports_no_family():
    bad = []
    for path in _core_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                       [node.module or ""] if isinstance(node, ast.ImportFrom) and
                       not node.level else [])
            bad += [f"{path.relative_to(PACKAGE)}:{node.lineno} imports {t}" for t in targets
                    if t.split(".")[:2] in ([["fairgames", f] for f in FAMILIES])]
    assert bad == []


def test_the_core_never_names_a_family_in_its_code():
    """No string of ``game/`` or ``train/`` code (docstrings and messages aside) is a
    family's registered name: no comparison with ``"reduction"``, no ``player("dro")``."""
    names = _family_names()
    bad = []
    for path in _core_modules():
        tree = ast.parse(path.read_text())
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and node.value in names and id(node) not in skip):
                bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value!r}")
    assert bad == []


def test_the_check_finds_a_family_name_in_core_code():
    # the same scan on a line the seam forbids
    tree = ast.parse('if cfg.algorithm.name == "reduction":\n    pass\n')
    assert any(isinstance(n, ast.Constant) and n.value in _family_names()
               for n in ast.walk(tree))


@pytest.mark.parametrize("first", ["fairgames.noisy_groups.robust", "fairgames.noisy_groups.ideal",
                                   "fairgames.noisy_groups.plugin",
                                   "fairgames.fair_regression.method",
                                   "fairgames.fair_regression.plugin",
                                   "fairgames.dataset_constraints.method",
                                   "fairgames.dataset_constraints.plugin", "fairgames.train.method",
                                   "fairgames.train.config"])
def test_any_module_imported_first_leaves_every_family_registered(first):
    # a family's modules import the core; the core's config loads the families: whichever is
    # imported first, no import goes round in a circle, and every family has registered by the
    # time a config is checked (validate, run and fit load a family skipped while its own
    # modules were being imported)
    code = (f"import {first}\n"
            "from omegaconf import OmegaConf\n"
            "from fairgames.train.config import ProblemConfig, TrainConfig, validate\n"
            "validate(OmegaConf.structured(TrainConfig(problem=ProblemConfig('p', 'error()'))))\n"
            "from fairgames.train.registry import extensions, family_groups, methods\n"
            "print(sorted(methods()), sorted(methods('robust.name')), "
            "[e.group for e in extensions()], sorted(family_groups()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["['mm',", "'reduction']", "['soft_assignments_ideal']",
                                  "['robust']", "['robust']"]
