"""Rate and metric helpers (paper 000 Table 1; paper 001 Table 2; TFCO's helpers and more).

Every helper takes an optional subset ``where`` (default: every example) and returns an
:class:`~fairgames.rates.expressions.Expression`. Rates are expectations of per-example
events; metrics are affine forms, ratios or ψ nodes of rates.

Example:
    >>> from fairgames.rates import fmeasure, group
    >>> c = fmeasure() >= fmeasure(group("race", "Black")) - 0.02
    >>> c.sense
    '<='

    The helpers evaluated on one batch (4 positives, 4 negatives; TP = 2, FN = 2, FP = 1):

    >>> import torch
    >>> from fairgames.rates import Batch, RateEvaluator
    >>> batch = Batch(scores=torch.tensor([2.0, 1.0, -1.0, -2.0, 0.5, -0.5, -1.0, -3.0]),
    ...               labels=torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]),
    ...               groups={"sex": torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])},
    ...               group_values={"sex": ["Male", "Female"]})
    >>> metrics = {"tpr": true_positive_rate(), "fpr": false_positive_rate(),
    ...            "precision": precision(), "f1": fmeasure(), "accuracy": accuracy(),
    ...            "gmean": gmean(), "precision_female": precision(group("sex", "Female"))}
    >>> values = RateEvaluator(list(metrics.values()))(batch)
    >>> {k: round(float(e.evaluate(values)), 3) for k, e in metrics.items()}
    {'tpr': 0.5, 'fpr': 0.25, 'precision': 0.667, 'f1': 0.571, 'accuracy': 0.625,
     'gmean': 0.612, 'precision_female': 1.0}
"""

from __future__ import annotations

from collections.abc import Sequence

from . import events as ev
from .expressions import Expression, Leaf, PsiNode
from .losses import Loss, as_loss
from .psi import KLD, geometric_mean, harmonic_mean, root_mean_square
from .subsets import Subset, as_subset, negative_label, positive_label


# --------------------------------------------------------------------------- leaves
def rate(event: ev.Event, where: Subset | None = None) -> Expression:
    """``E_w[event | where]`` as an expression (a single leaf).

    Example:
        >>> from fairgames.rates import events
        >>> print(rate(events.ERROR))
        +1·E[error | all]
    """
    return Expression.leaf(Leaf(as_subset(where), event=event))


def group_loss(loss: str | Loss, where: Subset | None = None) -> Expression:
    """``E_w[loss | where]`` for a per-example loss (bounded group loss, paper 003).

    Example:
        >>> print(group_loss("hinge"))
        +1·E[loss:hinge | all]
    """
    return Expression.leaf(Leaf(as_subset(where), loss=as_loss(loss)))


def _and(where: Subset | None, extra: Subset) -> Subset:
    return as_subset(where) & extra


# --------------------------------------------------------------------------- basic rates
def positive_prediction_rate(where: Subset | None = None) -> Expression:
    """P(ŷ = 1 | where).

    Example:
        >>> from fairgames.rates import group
        >>> print(positive_prediction_rate(group("sex", "Female")))
        +1·E[predicted_positive | group('sex', 'Female')]
    """
    return rate(ev.PREDICTED_POSITIVE, where)


def negative_prediction_rate(where: Subset | None = None) -> Expression:
    """P(ŷ = 0 | where).

    Example:
        >>> print(negative_prediction_rate())
        +1·E[predicted_negative | all]
    """
    return rate(ev.PREDICTED_NEGATIVE, where)


def coverage(where: Subset | None = None) -> Expression:
    """Share of examples predicted positive (paper 001's s_p(D)); same as the PPR.

    Example:
        >>> print(coverage())
        +1·E[predicted_positive | all]
    """
    return positive_prediction_rate(where)


def true_positive_rate(where: Subset | None = None) -> Expression:
    """TPR (recall) = P(ŷ = 1 | y = 1, where).

    Example:
        >>> from fairgames.rates import group
        >>> print(true_positive_rate(group("sex", "Female")))
        +1·E[predicted_positive | (group('sex', 'Female') & label(1))]
    """
    return rate(ev.PREDICTED_POSITIVE, _and(where, positive_label()))


recall = true_positive_rate


def false_negative_rate(where: Subset | None = None) -> Expression:
    """FNR = P(ŷ = 0 | y = 1, where) = 1 − TPR.

    Example:
        >>> print(false_negative_rate())
        +1·E[predicted_negative | label(1)]
    """
    return rate(ev.PREDICTED_NEGATIVE, _and(where, positive_label()))


def false_positive_rate(where: Subset | None = None) -> Expression:
    """FPR = P(ŷ = 1 | y = 0, where).

    Example:
        >>> from fairgames.rates import group
        >>> print(false_positive_rate(group("sex", "Female")))
        +1·E[predicted_positive | (group('sex', 'Female') & label(0))]
    """
    return rate(ev.PREDICTED_POSITIVE, _and(where, negative_label()))


def true_negative_rate(where: Subset | None = None) -> Expression:
    """TNR = P(ŷ = 0 | y = 0, where) = 1 − FPR.

    Example:
        >>> print(true_negative_rate())
        +1·E[predicted_negative | label(0)]
    """
    return rate(ev.PREDICTED_NEGATIVE, _and(where, negative_label()))


def true_positive_proportion(where: Subset | None = None) -> Expression:
    """TP = P(y = 1, ŷ = 1 | where).

    Example:
        >>> print(true_positive_proportion())
        +1·E[true_positive | all]
    """
    return rate(ev.TRUE_POSITIVE, where)


def false_positive_proportion(where: Subset | None = None) -> Expression:
    """FP = P(y = 0, ŷ = 1 | where).

    Example:
        >>> print(false_positive_proportion())
        +1·E[false_positive | all]
    """
    return rate(ev.FALSE_POSITIVE, where)


def true_negative_proportion(where: Subset | None = None) -> Expression:
    """TN = P(y = 0, ŷ = 0 | where).

    Example:
        >>> print(true_negative_proportion())
        +1·E[true_negative | all]
    """
    return rate(ev.TRUE_NEGATIVE, where)


def false_negative_proportion(where: Subset | None = None) -> Expression:
    """FN = P(y = 1, ŷ = 0 | where).

    Example:
        >>> print(false_negative_proportion())
        +1·E[false_negative | all]
    """
    return rate(ev.FALSE_NEGATIVE, where)


def error_rate(where: Subset | None = None) -> Expression:
    """P(ŷ ≠ y | where).

    Example:
        >>> from fairgames.rates import group
        >>> print(error_rate(group("sex", "Female")))
        +1·E[error | group('sex', 'Female')]
    """
    return rate(ev.ERROR, where)


def accuracy(where: Subset | None = None) -> Expression:
    """P(ŷ = y | where).

    Example:
        >>> print(accuracy())
        +1·E[correct | all]
    """
    return rate(ev.CORRECT, where)


def label_rate(where: Subset | None = None) -> Expression:
    """p = P(y = 1 | where): does not depend on the model (no multiplier, no surrogate).

    Example:
        >>> label_rate().depends_on_model
        False
    """
    return rate(ev.LABEL, where)


def score_rates(thresholds: float | Sequence[float],
                where: Subset | None = None) -> list[Expression]:
    """``P(f(x) >= z | where)`` for each threshold z: a vector of rates (paper 003's SP).

    Example:
        >>> [str(r) for r in score_rates([0.0, 1.0])]
        ['+1·E[score>=0 | all]', '+1·E[score>=1 | all]']
    """
    zs = [thresholds] if isinstance(thresholds, int | float) else list(thresholds)
    return [rate(ev.score_at_least(z), where) for z in zs]


# --------------------------------------------------------------------------- churn
def churn_rate(where: Subset | None = None) -> Expression:
    """Share of examples whose prediction differs from the baseline's (paper 001).

    Example:
        >>> print(churn_rate())
        +1·E[disagrees_with_baseline | all]
    """
    return rate(ev.DISAGREES_WITH_BASELINE, where)


def win_rate(where: Subset | None = None) -> Expression:
    """P(baseline wrong and new model right | where).

    Example:
        >>> print(win_rate())
        +1·E[win | all]
    """
    return rate(ev.WIN, where)


def loss_rate(where: Subset | None = None) -> Expression:
    """P(baseline right and new model wrong | where).

    Example:
        >>> print(loss_rate())
        +1·E[loss | all]
    """
    return rate(ev.LOSS, where)


def win_loss_ratio(where: Subset | None = None) -> Expression:
    """wins / losses over ``where`` (paper 000 Table 1's churn metric, a ratio).

    Example:
        >>> print(win_loss_ratio())
        +1·[+1·E[win | all]] / [+1·E[loss | all]]
    """
    return win_rate(where) / loss_rate(where)


# --------------------------------------------------------------------------- ratios
def precision(where: Subset | None = None) -> Expression:
    """TP / (TP + FP) = P(y = 1 | ŷ = 1, where), a ratio of rates.

    Written with TP + FP (not the predicted-positive rate, its equal) so that the ratio is in
    [0, 1] by structure, which keeps its surrogate bounds in [0, 1] too.

    Example:
        >>> print(precision())
        +1·[+1·E[true_positive | all]] / [+1·E[true_positive | all] +1·E[false_positive | all]]
    """
    tp = true_positive_proportion(where)
    return tp / (tp + false_positive_proportion(where))


def fbeta(beta: float = 1.0, where: Subset | None = None) -> Expression:
    """F_β = (1+β²)TP / ((1+β²)TP + β²FN + FP): pseudo-convex, so a ratio node (P3).

    Example:
        >>> print(fbeta(2.0))
        +1·[+5·E[true_positive | all]] / [+5·E[true_positive | all] +4·E[false_negative | all]
            +1·E[false_positive | all]]
    """
    if not beta > 0:
        raise ValueError(f"beta must be positive, got {beta}")
    b2 = float(beta) ** 2
    tp, fn, fp = (true_positive_proportion(where), false_negative_proportion(where),
                  false_positive_proportion(where))
    return ((1 + b2) * tp) / ((1 + b2) * tp + b2 * fn + fp)


def fmeasure(where: Subset | None = None) -> Expression:
    """F₁ = 2TP / (2TP + FP + FN).

    Example:
        >>> print(fmeasure())
        +1·[+2·E[true_positive | all]] / [+2·E[true_positive | all] +1·E[false_negative | all]
            +1·E[false_positive | all]]
    """
    return fbeta(1.0, where)


def predictive_parity(group_a: Subset, group_b: Subset) -> Expression:
    """precision(A) − precision(B) (a difference of ratios, paper 000 Table 1).

    Example:
        >>> from fairgames.rates import group
        >>> print(predictive_parity(group("sex", "Female"), group("sex", "Male")))
        +1·[+1·E[true_positive | group('sex', 'Female')]] / [...]
            -1·[+1·E[true_positive | group('sex', 'Male')]] / [...]
    """
    return precision(group_a) - precision(group_b)


def fmeasure_parity(group_a: Subset, group_b: Subset) -> Expression:
    """F₁(A) − F₁(B).

    Example:
        >>> from fairgames.rates import group
        >>> print(fmeasure_parity(group("sex", "Female"), group("sex", "Male")))
        +1·[+2·E[true_positive | group('sex', 'Female')]] / [...]
            -1·[+2·E[true_positive | group('sex', 'Male')]] / [...]
    """
    return fmeasure(group_a) - fmeasure(group_b)


def win_loss_parity(group_a: Subset, group_b: Subset) -> Expression:
    """wins_A/losses_A − wins_B/losses_B (paper 000 Table 1's churn row).

    Example:
        >>> from fairgames.rates import group
        >>> print(win_loss_parity(group("sex", "Female"), group("sex", "Male")))
        +1·[+1·E[win | group('sex', 'Female')]] / [+1·E[loss | group('sex', 'Female')]]
            -1·[+1·E[win | group('sex', 'Male')]] / [+1·E[loss | group('sex', 'Male')]]
    """
    return win_loss_ratio(group_a) - win_loss_ratio(group_b)


# --------------------------------------------------------------------------- ψ metrics
def gmean(where: Subset | None = None) -> Expression:
    """G-mean = sqrt(TPR · TNR) (concave; paper 000's loss form is ``1 - gmean()``).

    Example:
        >>> print(gmean())
        +1·geometric_mean2(+1·E[predicted_positive | label(1)], +1·E[predicted_negative | label(0)])
    """
    return Expression.node(PsiNode(geometric_mean(2),
                                   (true_positive_rate(where), true_negative_rate(where))))


def hmean(where: Subset | None = None) -> Expression:
    """H-mean = 2 / (1/TPR + 1/TNR) (concave; the loss form is ``1 - hmean()``).

    Example:
        >>> print(hmean())
        +1·harmonic_mean2(+1·E[predicted_positive | label(1)], +1·E[predicted_negative | label(0)])
    """
    return Expression.node(PsiNode(harmonic_mean(2),
                                   (true_positive_rate(where), true_negative_rate(where))))


def qmean(where: Subset | None = None) -> Expression:
    """Q-mean = 1 − sqrt((FPR² + FNR²)/2) (the loss form ``1 - qmean()`` is convex).

    Example:
        >>> print(qmean())
        +1 -1·root_mean_square2(+1·E[predicted_negative | label(1)],
            +1·E[predicted_positive | label(0)])
    """
    return 1.0 - Expression.node(PsiNode(root_mean_square(2),
                                         (false_negative_rate(where), false_positive_rate(where))))


def kld(where: Subset | None = None, reference: Subset | None = None) -> Expression:
    """KLD(p, p̂) with p = P(y = 1 | reference) and p̂ = P(ŷ = 1 | where) (paper 000 Table 1).

    ``reference`` defaults to every example, so ``kld(group(...))`` compares a group's predicted
    positive rate with the overall base rate, as in paper 000's Table 3 fairness metric.

    Example:
        >>> from fairgames.rates import group
        >>> print(kld(group("sex", "Female")))
        +1·kld(+1·E[label | all], +1·E[predicted_positive | group('sex', 'Female')])
    """
    return Expression.node(PsiNode(KLD, (label_rate(reference), positive_prediction_rate(where))))
