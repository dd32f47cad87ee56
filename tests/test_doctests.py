"""Every module of the ``fairgames`` package imports, and its doctests pass.

One case per module. A module that cannot be imported fails its case (it is never skipped):
the package has no optional extras, so every module must import in the test environment.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import fairgames

OPTIONFLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _module_names() -> list[str]:
    names = [fairgames.__name__]
    # onerror: a sub-package whose __init__ fails to import is still listed (and then fails).
    for info in pkgutil.walk_packages(fairgames.__path__, prefix=fairgames.__name__ + ".",
                                      onerror=names.append):
        names.append(info.name)
    return sorted(set(names))


MODULES = _module_names()


def test_modules_found():
    assert len(MODULES) > 10, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_module_doctests(name: str) -> None:
    module = importlib.import_module(name)  # an import error fails the case
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = [t for t in finder.find(module, name) if t.examples]
    failures: list[str] = []

    class _Runner(doctest.DocTestRunner):
        def report_failure(self, out, test, example, got):  # noqa: D102
            failures.append(f"{test.name} (line {_line(test, example)}):\n"
                            f">>> {example.source.rstrip()}\n"
                            f"expected:\n{example.want}got:\n{got}")

        def report_unexpected_exception(self, out, test, example, exc_info):  # noqa: D102
            err = "".join(doctest.traceback.format_exception_only(*exc_info[:2]))
            failures.append(f"{test.name} (line {_line(test, example)}):\n"
                            f">>> {example.source.rstrip()}\n"
                            f"raised:\n{err}")

    runner = _Runner(optionflags=OPTIONFLAGS, verbose=False)
    for test in tests:
        runner.run(test, out=lambda _s: None)
    if failures:
        pytest.fail(f"{len(failures)} failing doctest example(s) in {name}:\n\n"
                    + "\n\n".join(failures), pytrace=False)


def _line(test: doctest.DocTest, example: doctest.Example) -> str:
    if test.lineno is None:
        return "?"
    return str(test.lineno + example.lineno + 1)
