"""What a problem's ``"auto"`` and ``null`` settings stand for, by the problem's family: the
surrogate (:func:`default_surrogate`), its temperature (:func:`default_temperature`), the step
budget (:func:`default_steps`) and the game (:func:`default_game`), read off the shape of the
objective and the constraints (affine in the rates, ratios, ψ, threshold rates).
"""

from __future__ import annotations

from collections.abc import Iterable

from fairgames.rates import Constraint, Expression, Leaf, PsiNode, RatioNode, as_expression

# ``Problem(surrogate=...)``'s default: the surrogate :func:`default_surrogate` picks
AUTO_SURROGATE = "auto"


def _two_sided_psi(expr: Expression) -> bool:
    """Whether ``expr`` holds a ψ monotone in neither direction in a model-dependent argument
    (KLD's ``p̂``)."""
    for _, node in expr.nodes:
        if isinstance(node, PsiNode):
            for sign, arg in zip(node.psi.monotone, node.args, strict=True):
                if (sign == 0 and arg.depends_on_model) or _two_sided_psi(arg):
                    return True
    return False


def _has_ratio(expr: Expression) -> bool:
    """Whether ``expr`` holds a ratio of rates (at any depth)."""
    return any(isinstance(node, RatioNode) or any(_has_ratio(a) for a in node.args)
               for _, node in expr.nodes)


def default_surrogate(objective: Expression | None, constraints: Iterable[Constraint]) -> str:
    """The surrogate ``"auto"`` stands for: ``"sigmoid"`` when the problem needs its rates
    tracked from both sides — a ψ monotone in neither direction (KLD: paper 000's Remark 3,
    a one-sided bound leaves ψ's domain), or ratios of rates in the objective *and* in a
    constraint (F-measure parity) — else ``"hinge"``.

    Where a ratio sits on one side only and the other is affine in the rates (an error
    objective, an error bound), the hinge's convexity drives the affine side well and the
    recommended LP mixture settles the rest: measured on the catalog
    (``benchmarks/results/solved_by_default.discussion.md``), the sigmoid lost there.

    Example:
        >>> from fairgames.rates import error_rate, fmeasure, group, kld, true_positive_rate
        >>> default_surrogate(error_rate(), [true_positive_rate() >= 0.5])
        'hinge'
        >>> f = group("sex", "Female")
        >>> default_surrogate(1 - fmeasure(), [fmeasure(f) >= fmeasure() - 0.02])
        'sigmoid'
        >>> default_surrogate(kld(f), [error_rate() <= 0.2])
        'sigmoid'
    """
    obj, exprs = _expressions(objective, constraints)
    if any(_two_sided_psi(e) or reads_thresholds(e) for e in obj + exprs):
        return "sigmoid"
    both = any(_has_ratio(e) for e in obj) and any(_has_ratio(e) for e in exprs)
    return "sigmoid" if both else "hinge"


# The sigmoid's temperature on threshold rates P[f ≥ z] of predictions in [0, 1] (paper
# 003's grid, spacing 1/N = 0.025 at N = 40): the width over which θ sees a prediction cross
# a threshold. Chosen by a sweep τ ∈ {0.02, 0.05, 0.1, 0.25} of sp_regression on Law and Crime:
# every τ met the constraints on train; 0.05 traded Crime's loss against its test violation
# best (Law barely moved).
THRESHOLD_TEMPERATURE = 0.05


def reads_thresholds(expr: Expression) -> bool:
    """Whether ``expr`` reads a threshold rate ``P[f ≥ z]`` (``score_at_least``).

    Example:
        >>> from fairgames.rates import error_rate, score_rates
        >>> reads_thresholds(score_rates(0.5)[0]), reads_thresholds(error_rate())
        (True, False)
    """
    return bool(threshold_points(as_expression(expr).leaves()))


def threshold_points(leaves: Iterable[Leaf]) -> list[float]:
    """The thresholds ``z`` of the threshold-rate leaves ``P[f ≥ z]`` among ``leaves``
    (``score_at_least``: the one event read through a non-strict indicator), sorted.

    Example:
        >>> from fairgames.rates import error_rate, score_rates
        >>> threshold_points([lf for e in score_rates([1.0, 0.5]) + [error_rate()]
        ...                   for lf in e.leaves()])
        [0.5, 1.0]
    """
    return sorted({lf.event.indicator.threshold for lf in leaves
                   if lf.event is not None and not lf.event.indicator.strict})


def default_temperature(objective: Expression | None, constraints: Iterable[Constraint]
                        ) -> float:
    """The surrogate's scale ``algorithm.temperature=null`` stands for: 1 on scores (the
    margin ``s − 0`` of a classifier), :data:`THRESHOLD_TEMPERATURE` where a statement reads
    threshold rates of predictions in [0, 1] (paper 003's statistical parity): a unit scale
    there would blur the whole range of f into one slope.

    Example:
        >>> from fairgames.rates import error_rate, score_rates
        >>> default_temperature(error_rate(), []), default_temperature(
        ...     error_rate(), [score_rates(0.5)[0] <= 0.4])
        (1.0, 0.05)
    """
    obj, exprs = _expressions(objective, constraints)
    return THRESHOLD_TEMPERATURE if any(reads_thresholds(e) for e in obj + exprs) else 1.0


def _expressions(objective: Expression | None, constraints: Iterable[Constraint]
                 ) -> tuple[list[Expression], list[Expression]]:
    """The objective (a list of none or one) and the constraints' expressions."""
    obj = [as_expression(objective)] if objective is not None else []
    return obj, [c.expression for c in constraints]


STEPS_AFFINE = 500       # full-batch steps where every statement is affine in the rates
STEPS_NONLINEAR = 1000   # ... and where one holds a ratio of rates or a ψ


def default_steps(objective: Expression | None, constraints: Iterable[Constraint]) -> int:
    """The step budget ``trainer.steps=null`` stands for: :data:`STEPS_AFFINE` when every
    statement is affine in the rates (equal opportunity, demographic parity, error, churn),
    else :data:`STEPS_NONLINEAR` (ratios of rates, ψ of rates: F-measure parity, predictive
    parity, KLD, G-mean). Measured on the catalog
    (``benchmarks/results/solved_by_default.discussion.md``): the affine
    games have settled by 500 full-batch steps (1 000 move the objective by at most 0.001),
    the others gain up to 0.16 in their objective from 500 to 1 000.

    Example:
        >>> from fairgames.rates import error_rate, fmeasure, group, true_positive_rate
        >>> f = group("sex", "Female")
        >>> default_steps(error_rate(), [true_positive_rate(f) >= true_positive_rate() - 0.05])
        500
        >>> default_steps(1 - fmeasure(), [fmeasure(f) >= fmeasure() - 0.02])
        1000
    """
    obj, exprs = _expressions(objective, constraints)
    return STEPS_NONLINEAR if any(e.nodes for e in obj + exprs) else STEPS_AFFINE


# The game of the threshold-grid family (paper 003's statistical parity): the flat
# ``algorithm`` keys of the preset and its players. θ takes theta_steps steps per step of a
# slow exponentiated-gradient λ, because the default preset's λ moves too fast for θ there
# and its mixtures lose objective to the paper's reduction (benchmarks/results/
# fair_regression.discussion.md, "Direct play").
THRESHOLD_GAME = {"name": "algorithm1", "multipliers": "exponentiated_gradient",
                  "radius": 10.0, "multiplier_lr": 2.0, "theta_steps": 5}


def default_game(objective: Expression | None, constraints: Iterable[Constraint]
                 ) -> dict[str, object] | None:
    """The game a problem's family plays in place of the default preset (the flat
    ``algorithm`` keys): :data:`THRESHOLD_GAME` where a constraint reads threshold rates
    ``P[f ≥ z]`` (``score_at_least``: the statistical-parity grid of paper 003), else
    ``None`` (the default preset).

    Example:
        >>> from fairgames.rates import error_rate, score_rates
        >>> default_game(error_rate(), [score_rates(0.5)[0] <= 0.4])["name"]
        'algorithm1'
        >>> default_game(score_rates(0.5)[0], [error_rate() <= 0.2]) is None
        True
    """
    _, exprs = _expressions(objective, constraints)
    return dict(THRESHOLD_GAME) if any(reads_thresholds(e) for e in exprs) else None
