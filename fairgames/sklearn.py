"""A scikit-learn classifier trained under rate constraints: :class:`ConstrainedClassifier`.

``fit(X, y, sensitive_features=A)`` plays fairgames' game on the encoded features ``X`` (use a
``Pipeline`` for the encoding) with ``A`` as the protected attribute, and keeps the run's
solution to deploy (``solution="recommended"``: the one the engine recommends; often a
mixture of snapshots, a *randomised* classifier). ``predict_proba`` is the exact probability
of a positive prediction of that classifier (not a calibrated class probability); ``predict``
draws one member per row, seeded by ``random_state`` so that it repeats. The run's whole
record (``results.json``: the verdict per constraint, the solutions on every split) is
``results_``.

``sensitive_features`` is per-row metadata: with scikit-learn's metadata routing on
(``sklearn.set_config(enable_metadata_routing=True)``) a ``Pipeline`` or ``GridSearchCV``
passes it to this step once it is requested, ``clf.set_fit_request(sensitive_features=True)``.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(400, 3)); a = rng.integers(0, 2, 400)
    >>> y = (X[:, 0] + a + rng.normal(size=400) > 0.5).astype(int)
    >>> clf = ConstrainedClassifier("demographic_parity", tolerance=0.1, steps=60)
    >>> clf.fit(X, y, sensitive_features=a).predict_proba(X).shape
    (400, 2)
    >>> sorted(clf.results_["verdict"]["constraints"])[:1]
    ['ppr_high[0]']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from fairgames.data import DatasetSplits, TabularDataset
from fairgames.models import build_model, decision_threshold
from fairgames.train import fit as fit_run
from fairgames.train.deploy.predictor import Predictor

PROTECTED = "sensitive"


class ConstrainedClassifier(ClassifierMixin, BaseEstimator):
    """A binary classifier trained as a fairgames game (see the module's docstring).

    Args:
        problem: a catalog problem's name (``configs/problem/``) or a
            :class:`fairgames.problems.ProblemSpec`.
        tolerance: the problem's ``tolerance`` (``None``: the problem's own).
        model: ``"linear"`` or ``"mlp"``; ``hidden``: the MLP's layer widths.
        algorithm: a preset of ``fairgames.game.PRESETS``.
        lr: θ's Adam step; ``multiplier_lr``: λ's (``None``: the preset's).
        steps: full-batch (or minibatch, with ``batch_size``) steps (``None``: the
            problem's default, 500 or 1 000).
        solution: which of the run's solutions predicts: ``recommended``, ``best_iterate``,
            ``final`` or ``stochastic``.
        validation_fraction: a share of the rows held out (stratified by label and group) to
            choose the best iterate and the mixture's candidates on; ``0``: chosen on the
            training rows.
        random_state: the run's seed and :meth:`predict`'s draws.
    """

    def __init__(self, problem: Any = "demographic_parity", *, tolerance: float | None = None,
                 model: str = "linear", hidden: Sequence[int] = (64,),
                 algorithm: str = "proxy_lagrangian", lr: float = 0.01,
                 multiplier_lr: float | None = None, steps: int | None = None,
                 batch_size: int | None = None, solution: str = "recommended",
                 validation_fraction: float = 0.0, random_state: int = 0) -> None:
        self.problem, self.tolerance, self.model, self.hidden = problem, tolerance, model, hidden
        self.algorithm, self.lr, self.multiplier_lr = algorithm, lr, multiplier_lr
        self.steps, self.batch_size, self.solution = steps, batch_size, solution
        self.validation_fraction, self.random_state = validation_fraction, random_state

    def fit(self, X: Any, y: Any, *, sensitive_features: Any = None) -> ConstrainedClassifier:
        """Train on ``X`` ``[n, d]`` (numbers), binary ``y`` and the protected attribute
        ``sensitive_features`` ``[n]`` (any values; each distinct value is a group).

        Raises:
            ValueError: no ``sensitive_features`` (the remedy: pass it, or route it with
                ``set_fit_request``), one of another length, more than two classes, a bad
                ``solution`` or ``validation_fraction``.
        """
        X, y = validate_data(self, X, y, dtype=np.float32)
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if len(self.classes_) != 2:
            raise ValueError(f"Only binary classification is supported (ConstrainedClassifier); "
                             f"y has {len(self.classes_)} class(es): {self.classes_.tolist()}")
        if self.solution not in ("recommended", "best_iterate", "final", "stochastic"):
            raise ValueError(f"solution={self.solution!r}: choose recommended, best_iterate, "
                             "final or stochastic")
        codes, names = _groups(sensitive_features, len(y))
        labels = (y == self.classes_[1]).astype(np.float32)
        splits = self._splits(X, labels, codes, names)
        torch.manual_seed(self.random_state)
        options = {"hidden": list(self.hidden)} if self.model == "mlp" else {}
        net = build_model(self.model, X.shape[1], **options)
        algorithm = {"name": self.algorithm}
        if self.multiplier_lr is not None:
            algorithm["multiplier_lr"] = self.multiplier_lr
        trainer = {"steps": self.steps, "batch_size": self.batch_size, "log_every": 50,
                   "selection_split": "validation" if self.validation_fraction else "train"}
        result = fit_run(net, self.problem, splits, protected=PROTECTED,
                         optimizer=torch.optim.Adam(net.parameters(), lr=self.lr),
                         algorithm=algorithm, trainer=trainer, seed=self.random_state,
                         tolerance=self.tolerance)
        self.results_ = result.results
        self.predictor_ = Predictor(result.extras["solutions"][self.solution],
                                    decision=decision_threshold(net), name=self.solution)
        return self

    def _splits(self, X: np.ndarray, labels: np.ndarray, codes: np.ndarray,
                names: list[str]) -> DatasetSplits:
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError(f"validation_fraction={self.validation_fraction}: must lie in "
                             "[0, 1)")
        rows = np.arange(len(labels))
        held = _stratified_share(labels, codes, self.validation_fraction, self.random_state)
        train_rows = rows[~held] if held.any() else rows
        val_rows = rows[held] if held.any() else rows

        def part(index: np.ndarray) -> TabularDataset:
            return TabularDataset(
                features=torch.from_numpy(X[index]), labels=torch.from_numpy(labels[index]),
                label_kind="binary", groups={PROTECTED: torch.from_numpy(codes[index])},
                group_names={PROTECTED: names},
                feature_names=[f"x{i}" for i in range(X.shape[1])], label_name="y",
                name="sklearn")
        return DatasetSplits(part(train_rows), part(val_rows), part(val_rows),
                             metadata={"name": "sklearn"})

    def predict_proba(self, X: Any) -> np.ndarray:
        """``[n, 2]``: the probabilities of predicting ``classes_[0]`` and ``classes_[1]``
        (exact over the mixture's members; 0/1 for a deterministic solution)."""
        features = self._features(X)
        p = self.predictor_.predict_proba(features).cpu().numpy()
        return np.stack([1.0 - p, p], axis=1)

    def predict(self, X: Any) -> np.ndarray:
        """``[n]`` labels, one member of a mixture drawn per row (seeded by
        ``random_state``)."""
        features = self._features(X)
        hit = self.predictor_.predict(features, seed=self.random_state)
        return self.classes_[hit.cpu().numpy().astype(int)]

    def _features(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "predictor_")
        return validate_data(self, X, dtype=np.float32, reset=False)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        tags.non_deterministic = False
        return tags


def _groups(sensitive_features: Any, n: int) -> tuple[np.ndarray, list[str]]:
    """Integer codes ``[n]`` and names of the protected attribute's values."""
    if sensitive_features is None:
        raise ValueError(
            "ConstrainedClassifier.fit needs sensitive_features (the protected attribute, "
            "one value per row): fit(X, y, sensitive_features=a); in a Pipeline or "
            "GridSearchCV enable metadata routing and call "
            "set_fit_request(sensitive_features=True) on this step")
    values = np.asarray(sensitive_features)
    if values.ndim != 1 or len(values) != n:
        raise ValueError(f"sensitive_features must be one value per row ({n}), got shape "
                         f"{values.shape}")
    uniques, codes = np.unique(values.astype(str), return_inverse=True)
    return codes.astype(np.int64), [str(u) for u in uniques]


def _stratified_share(labels: np.ndarray, codes: np.ndarray, share: float, seed: int
                      ) -> np.ndarray:
    """A boolean mask holding out ``share`` of every (label, group) cell's rows."""
    held = np.zeros(len(labels), dtype=bool)
    if share <= 0.0:
        return held
    rng = np.random.default_rng(seed)
    for cell in np.unique(np.stack([labels, codes]), axis=1).T:
        rows = np.flatnonzero((labels == cell[0]) & (codes == cell[1]))
        take = int(round(share * len(rows)))
        held[rng.permutation(rows)[:take]] = True
    return held
