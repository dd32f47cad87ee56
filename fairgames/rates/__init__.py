"""Rate expressions: subsets, leaves, metric helpers, constraints and the fused evaluator.

Example:
    >>> import torch
    >>> from fairgames.rates import Batch, RateEvaluator, fmeasure, group
    >>> female = group("sex", "Female")
    >>> parity = (fmeasure(female) >= fmeasure() - 0.02).named("f1_parity")
    >>> ev = RateEvaluator([fmeasure(), parity])
    >>> batch = Batch(scores=torch.tensor([2.0, -1.0, 0.5, -0.2]),
    ...               labels=torch.tensor([1.0, 1.0, 0.0, 0.0]),
    ...               groups={"sex": torch.tensor([1, 0, 1, 0])},
    ...               group_values={"sex": ["Male", "Female"]})
    >>> values = ev(batch)
    >>> round(float(fmeasure().evaluate(values)), 4)
    0.5
"""

from .batch import LABEL_KINDS, Batch
from .bootstrap import Bootstrap, multinomial_counts, percentile_interval, stratum_codes
from .errors import EmptySubsetError, NonFiniteScoresError, RatesError
from .evaluator import LeafValues, RateEvaluator
from .events import EVENTS, Event, Indicator, predicted_positive_at, score_at_least
from .exact import (
    ExactEvaluator,
    GroupTable,
    classification_metrics,
    regression_metrics,
    summary_metrics,
)
from .expressions import (
    AffineForm,
    Constraint,
    Expression,
    Leaf,
    LeafLookup,
    Node,
    PsiNode,
    RatioNode,
    as_expression,
    leaves_of,
)
from .guards import NoHostSync, no_host_sync
from .losses import LOSSES, Loss, as_loss
from .metrics import (
    accuracy,
    churn_rate,
    coverage,
    error_rate,
    false_negative_proportion,
    false_negative_rate,
    false_positive_proportion,
    false_positive_rate,
    fbeta,
    fmeasure,
    fmeasure_parity,
    gmean,
    group_loss,
    hmean,
    kld,
    label_rate,
    loss_rate,
    negative_prediction_rate,
    positive_prediction_rate,
    precision,
    predictive_parity,
    qmean,
    rate,
    recall,
    score_rates,
    true_negative_proportion,
    true_negative_rate,
    true_positive_proportion,
    true_positive_rate,
    win_loss_parity,
    win_loss_ratio,
    win_rate,
)
from .psi import KLD, Psi, geometric_mean, harmonic_mean, root_mean_square
from .subsets import (
    Subset,
    baseline_negative,
    baseline_positive,
    everything,
    group,
    negative_label,
    positive_label,
    source,
)
from .surrogates import Surrogate, sign_correct_sum, sign_split
from .thresholds import ThresholdRates, ks_disparity, threshold_grid, threshold_rates

# Reviewed (issue 45): the names dir() exported, less the submodules' own names (`batch`,
# `values`, ...), which `import *` bound as a side effect; the submodules stay importable.
__all__ = [
    # batches and errors
    "LABEL_KINDS", "Batch", "EmptySubsetError", "NonFiniteScoresError", "RatesError",
    # events, subsets, losses
    "EVENTS", "Event", "Indicator", "predicted_positive_at", "score_at_least",
    "Subset", "baseline_negative", "baseline_positive", "everything", "group",
    "negative_label", "positive_label", "source",
    "LOSSES", "Loss", "as_loss",
    # expressions and ψ
    "AffineForm", "Constraint", "Expression", "Leaf", "LeafLookup", "Node", "PsiNode",
    "RatioNode", "as_expression", "leaves_of",
    "KLD", "Psi", "geometric_mean", "harmonic_mean", "root_mean_square",
    # metric helpers
    "accuracy", "churn_rate", "coverage", "error_rate", "false_negative_proportion",
    "false_negative_rate", "false_positive_proportion", "false_positive_rate", "fbeta",
    "fmeasure", "fmeasure_parity", "gmean", "group_loss", "hmean", "kld", "label_rate",
    "loss_rate", "negative_prediction_rate", "positive_prediction_rate", "precision",
    "predictive_parity", "qmean", "rate", "recall", "score_rates",
    "true_negative_proportion", "true_negative_rate", "true_positive_proportion",
    "true_positive_rate", "win_loss_parity", "win_loss_ratio", "win_rate",
    # evaluation: the fused pass, exact splits, the bootstrap, thresholds
    "LeafValues", "RateEvaluator", "Surrogate", "sign_correct_sum", "sign_split",
    "NoHostSync", "no_host_sync",
    "ExactEvaluator", "GroupTable", "classification_metrics", "regression_metrics",
    "summary_metrics",
    "Bootstrap", "multinomial_counts", "percentile_interval", "stratum_codes",
    "ThresholdRates", "ks_disparity", "threshold_grid", "threshold_rates",
]
