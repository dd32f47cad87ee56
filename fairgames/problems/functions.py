"""The functions a problem statement may call, mapped to :mod:`fairgames.rates` helpers.

Every rate function takes the same optional keyword arguments that pick the subset of the
examples it is computed on:

* ``group=V``: only examples whose protected attribute (``data.protected``) equals ``V``, a
  value name (``"Female"``) or an integer code (``1``); a single positional argument means the
  same (``tpr("Female")``);
* ``not_group=V``: every example *except* that group (the "other" side of a parity);
* ``label=0|1``: only negative / positive examples (refused by rates that already condition
  on the label, such as ``tpr``);
* ``attribute="race"``: read ``group`` / ``not_group`` on another attribute of the data set;
* ``source="d2"``: only examples of that source data set (several data sets in one problem,
  paper 001).

``fbeta(beta)`` and ``group_loss(loss)`` take one parameter first. ``sum(... for g in groups)``
and ``mean(... for g in groups)`` aggregate over the values of the protected attribute and are
handled by the compiler.

Example:
    >>> sorted(FUNCTIONS)[:4]
    ['accuracy', 'base_rate', 'churn', 'coverage']
    >>> FUNCTIONS["fmeasure"].summary
    'F1 = 2TP / (2TP + FP + FN) (a ratio of rates; paper 000 Table 1)'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fairgames import rates as R

SUBSET_KEYWORDS = ("group", "not_group", "label", "attribute", "source")
AGGREGATORS = {"sum": "the sum over the values of the protected attribute",
               "mean": "the mean over the values of the protected attribute"}


@dataclass(frozen=True)
class Function:
    """A callable of the language.

    Attributes:
        name: how statements call it.
        build: ``build(where, *params) -> Expression`` with ``where`` a subset (or ``None``).
        params: names of its leading parameters (positional or keyword).
        param_types: ``"number"`` or ``"string"`` for each parameter.
        conditions_on_label: the rate already fixes the label (``label=`` is refused).
        summary: one line for error messages and docs.

    Example:
        >>> f = FUNCTIONS["fbeta"]
        >>> f.params, f.keywords
        (('beta',), ('beta', 'group', 'not_group', 'label', 'attribute', 'source'))
        >>> print(f.build(None, 2.0))
        +1·[+5·E[true_positive | all]] / [+5·E[true_positive | all] +4·E[false_negative | all]
            +1·E[false_positive | all]]
    """

    name: str
    build: Callable[..., R.Expression]
    summary: str
    params: tuple[str, ...] = ()
    param_types: tuple[str, ...] = ()
    conditions_on_label: bool = False

    @property
    def keywords(self) -> tuple[str, ...]:
        """Keyword arguments a call accepts: the parameters, then the subset keywords."""
        return self.params + SUBSET_KEYWORDS


def _rate(name: str, helper: Callable[..., R.Expression], summary: str,
          on_label: bool = False) -> Function:
    return Function(name, lambda where: helper(where), summary, conditions_on_label=on_label)


_TABLE = [
    _rate("ppr", R.positive_prediction_rate, "P(ŷ=1): positive prediction rate"),
    _rate("npr", R.negative_prediction_rate, "P(ŷ=0): negative prediction rate"),
    _rate("tpr", R.true_positive_rate, "P(ŷ=1 | y=1): true positive rate (recall)", True),
    _rate("fnr", R.false_negative_rate, "P(ŷ=0 | y=1): false negative rate", True),
    _rate("fpr", R.false_positive_rate, "P(ŷ=1 | y=0): false positive rate", True),
    _rate("tnr", R.true_negative_rate, "P(ŷ=0 | y=0): true negative rate", True),
    _rate("tp", R.true_positive_proportion, "P(y=1, ŷ=1): true positive proportion"),
    _rate("fp", R.false_positive_proportion, "P(y=0, ŷ=1): false positive proportion"),
    _rate("tn", R.true_negative_proportion, "P(y=0, ŷ=0): true negative proportion"),
    _rate("fn", R.false_negative_proportion, "P(y=1, ŷ=0): false negative proportion"),
    _rate("error", R.error_rate, "P(ŷ≠y): error rate"),
    _rate("accuracy", R.accuracy, "P(ŷ=y): accuracy"),
    _rate("base_rate", R.label_rate, "P(y=1): the label rate (does not depend on the model)"),
    _rate("precision", R.precision, "TP / (TP + FP) (a ratio of rates)"),
    _rate("fmeasure", R.fmeasure, "F1 = 2TP / (2TP + FP + FN) (a ratio of rates; paper 000 "
          "Table 1)"),
    _rate("gmean", R.gmean, "sqrt(TPR·TNR), concave (minimise 1 - gmean())"),
    _rate("hmean", R.hmean, "2 / (1/TPR + 1/TNR), concave (minimise 1 - hmean())"),
    _rate("qmean", R.qmean, "1 - sqrt((FPR² + FNR²)/2) (minimise 1 - qmean())"),
    _rate("kld", R.kld, "KLD(p, p̂): p = overall base rate, p̂ = P(ŷ=1) on the subset (convex)"),
    _rate("churn", R.churn_rate, "P(ŷ ≠ baseline's prediction) (needs a baseline model)"),
    _rate("win_rate", R.win_rate, "P(baseline wrong, new model right) (needs a baseline)"),
    _rate("loss_rate", R.loss_rate, "P(baseline right, new model wrong) (needs a baseline)"),
    _rate("win_loss_ratio", R.win_loss_ratio, "wins / losses against the baseline (a ratio)"),
    Function("fbeta", lambda where, beta: R.fbeta(float(beta), where),
             "F_beta = (1+β²)TP / ((1+β²)TP + β²FN + FP), e.g. fbeta(2)", ("beta",),
             ("number",)),
    Function("score_at_least", lambda where, z: R.score_rates(float(z), where)[0],
             "P(f(x) >= z): the share of predictions at least z (paper 003's statistical "
             "parity on the grid: for z in thresholds)", ("z",), ("number",)),
    Function("group_loss", lambda where, loss: R.group_loss(loss, where),
             "E[loss | subset] of a per-example loss: " + ", ".join(sorted(R.LOSSES)),
             ("loss",), ("string",)),
]

_ALIASES = {"recall": "tpr", "coverage": "ppr", "positive_rate": "ppr", "error_rate": "error",
            "f1": "fmeasure", "label_rate": "base_rate"}

FUNCTIONS: dict[str, Function] = {f.name: f for f in _TABLE}
for _alias, _target in _ALIASES.items():
    _f = FUNCTIONS[_target]
    FUNCTIONS[_alias] = Function(_alias, _f.build, f"same as {_target}(): {_f.summary}",
                                 _f.params, _f.param_types, _f.conditions_on_label)


def known_functions() -> list[str]:
    """All callable names, aggregators included, sorted.

    Example:
        >>> names = known_functions()
        >>> names[:3], "sum" in names, "fmeasure" in names
        (['accuracy', 'base_rate', 'churn'], True, True)
    """
    return sorted([*FUNCTIONS, *AGGREGATORS])
