"""Problems written as text: a small, safe expression language and the problem catalog.

An objective and constraints are strings (``"1 - fmeasure()"``,
``"fmeasure(group=protected_group) >= fmeasure(not_group=protected_group) - tolerance"``)
parsed by a hand-written tokenizer and recursive-descent parser (no ``eval``) and compiled into
:mod:`fairgames.rates` expressions against a data set's groups. See ``docs/problems.md``.

Example:
    >>> from fairgames.problems import load_problem
    >>> spec = load_problem("fmeasure_parity")
    >>> built = spec.build("sex", {"sex": ["Male", "Female"]},
    ...                    group_counts={"Male": 700, "Female": 300})
    >>> [c.name for c in built.constraints], built.variables["protected_group"]
    (['f1_parity'], 'Female')
"""

from .catalog import available_problems, catalog_dir, documented_data_sets, load_problem
from .compiler import Environment, compile_constraint, compile_expression
from .errors import ProblemError, ProblemSyntaxError
from .functions import AGGREGATORS, FUNCTIONS, Function, known_functions
from .language import parse
from .spec import BuiltProblem, ProblemSpec
from .syntax import free_names
from .tokens import tokenize

__all__ = [
    "AGGREGATORS",
    "FUNCTIONS",
    "BuiltProblem",
    "documented_data_sets",
    "Environment",
    "Function",
    "ProblemError",
    "ProblemSpec",
    "ProblemSyntaxError",
    "available_problems",
    "catalog_dir",
    "compile_constraint",
    "compile_expression",
    "free_names",
    "known_functions",
    "load_problem",
    "parse",
    "tokenize",
]
