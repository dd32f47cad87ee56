"""docs/troubleshooting.md cannot drift from the code: every exception and warning class the
package defines has its section there, every section names a class that exists, and every
message quoted in a table is text the package's or the command line's source holds."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import fairgames

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "troubleshooting.md"
SECTION = re.compile(r"^## `(fairgames(?:\.\w+)+)`", re.M)
# a table row's first cell, in backticks: the message (or a literal part of it)
QUOTED = re.compile(r"^\| `([^`]+)`", re.M)
# Adjacent string literals split over lines ("abc "\n f"def"), as in the source's long messages
JOIN = re.compile(r"""(["'])\s*\n\s*(?:[rRfF]{1,2})?(["'])""")


def defined_classes() -> set[str]:
    """Every exception or warning class defined in a module of the package."""
    found = set()
    for info in pkgutil.walk_packages(fairgames.__path__, "fairgames."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and issubclass(obj, BaseException)
                    and obj.__module__ == module.__name__):
                found.add(f"{module.__name__}.{name}")
    return found


def source_text() -> str:
    files = [*sorted((ROOT / "fairgames").rglob("*.py")), ROOT / "scripts" / "train.py",
             ROOT / "scripts" / "predict.py"]
    text = "\n".join(f.read_text() for f in files)
    return JOIN.sub("", text)


def test_every_error_class_has_its_section_and_every_section_a_class():
    documented = set(SECTION.findall(DOC.read_text()))
    defined = defined_classes()
    assert defined - documented == set(), "undocumented in docs/troubleshooting.md"
    assert documented - defined == set(), "documented but not defined (renamed? removed?)"


def test_every_quoted_message_is_in_the_source():
    source = source_text()
    quoted = QUOTED.findall(DOC.read_text())
    assert len(quoted) >= 30
    missing = [q for q in quoted if q not in source]
    assert missing == [], "messages quoted in docs/troubleshooting.md that no source holds"
