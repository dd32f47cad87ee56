"""A scikit-learn classifier trained under rate constraints: :class:`ConstrainedClassifier`.

``fit(X, y, sensitive_features=A)`` plays fairgames' game on the encoded features ``X`` (use a
``Pipeline`` for the encoding) with ``A`` as the protected attribute, and keeps the run's
solution to deploy (``solution="recommended"``: the one the engine recommends; often a
mixture of snapshots, a *randomised* classifier). ``predict_proba`` is the exact probability
of a positive prediction of that classifier (not a calibrated class probability); ``predict``
draws one member per row, seeded by ``random_state`` so that it repeats. The run's whole
record (``results.json``: the verdict per constraint, the solutions on every split) is
``results_``; with ``validation_fraction=0`` (no held-out rows) it holds train figures only.
``decision_function`` is positive where ``classes_[1]`` is predicted. A scipy.sparse ``X`` is
made dense. Without ``sensitive_features`` (scikit-learn's own checks fit so) the problem's
objective alone is trained, with a warning, and every constraint is ``not_applicable``.
Persistence: ``pickle`` (or joblib); unpickling under another fairgames version warns.

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

import dataclasses
import functools
import re
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from fairgames.data import DatasetSplits, TabularDataset
from fairgames.models import build_model, decision_threshold
from fairgames.problems import ProblemSpec, load_problem
from fairgames.train import fit as fit_run
from fairgames.train.deploy.predictor import Predictor

PROTECTED = "sensitive"
NO_GROUPS = ("ConstrainedClassifier.fit got no sensitive_features: it trains the problem's "
             "objective alone and reports every group constraint not_applicable; pass "
             "fit(X, y, sensitive_features=a), or in a Pipeline or GridSearchCV enable "
             "metadata routing and call set_fit_request(sensitive_features=True) on this step")
# The run's advice speaks the CLI's keys; the estimator's parameters are their names here.
_HINTS = ((r"trainer\.steps=", "steps="), (r"problem\.tolerance=", "tolerance="),
          (r"trainer\.tune=validation", "validation_fraction=0.2"),
          (r"model=mlp", "model='mlp'"),
          (r"problem\.variables\.(\w+)", r"ProblemSpec variables['\1']"),
          (r"problem\.constraints\.(\w+)", r"ProblemSpec constraints['\1']"),
          (r"it reads no problem\.tolerance", "it reads no tolerance"))


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
            training rows, and ``results_`` holds no validation or test figures (there are
            no held-out rows).
        max_groups: the most distinct values ``sensitive_features`` may have (more is
            refused: a continuous attribute must be binned first).
        random_state: the run's seed and :meth:`predict`'s draws.
    """

    def __init__(self, problem: Any = "demographic_parity", *, tolerance: float | None = None,
                 model: str = "linear", hidden: Sequence[int] = (64,),
                 algorithm: str = "proxy_lagrangian", lr: float = 0.01,
                 multiplier_lr: float | None = None, steps: int | None = None,
                 batch_size: int | None = None, solution: str = "recommended",
                 validation_fraction: float = 0.0, max_groups: int = 20,
                 random_state: int = 0) -> None:
        self.problem, self.tolerance, self.model, self.hidden = problem, tolerance, model, hidden
        self.algorithm, self.lr, self.multiplier_lr = algorithm, lr, multiplier_lr
        self.steps, self.batch_size, self.solution = steps, batch_size, solution
        self.validation_fraction, self.random_state = validation_fraction, random_state
        self.max_groups = max_groups

    def fit(self, X: Any, y: Any, *, sensitive_features: Any = None,
            sample_weight: Any = None) -> ConstrainedClassifier:
        """Train on ``X`` ``[n, d]`` (numbers; a scipy.sparse matrix is made dense), binary
        ``y`` and the protected attribute ``sensitive_features`` ``[n]`` (two to
        ``max_groups`` distinct values, none missing; each value is a group). Without
        ``sensitive_features`` the problem's objective alone is trained: a ``UserWarning``
        says so and ``results_`` reports every constraint ``not_applicable``.
        ``sample_weight``: whole numbers, frequency weights (a row of weight 3 counts as
        three rows, weight 0 as none; the game and ``results_`` see the rows so repeated).

        Raises:
            ValueError: ``sensitive_features`` of another length, with one value, a missing
                value (NaN / None) or more than ``max_groups`` values; text in ``X``; more
                than two classes; a bad ``solution`` or ``validation_fraction``; a
                fractional or negative ``sample_weight``.
        """
        X, y = self._input(X, y, fitting=True)
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if len(self.classes_) != 2:
            raise ValueError(f"Only binary classification is supported (ConstrainedClassifier); "
                             f"y has {len(self.classes_)} class(es): {self.classes_.tolist()}")
        if self.solution not in ("recommended", "best_iterate", "final", "stochastic"):
            raise ValueError(f"solution={self.solution!r}: choose recommended, best_iterate, "
                             "final or stochastic")
        spec = self.problem if isinstance(self.problem, ProblemSpec) else \
            load_problem(self.problem)
        grouped = sensitive_features is not None
        if grouped:
            codes, names = _groups(sensitive_features, len(y), self.max_groups)
        else:
            warnings.warn(NO_GROUPS, UserWarning, stacklevel=2)
            codes, names = np.zeros(len(y), dtype=np.int64), ["all"]
        labels = (y == self.classes_[1]).astype(np.float32)
        counts = _frequency_weights(sample_weight, X)
        splits = self._splits(X, labels, codes, names, counts)
        torch.manual_seed(self.random_state)
        options = {"hidden": list(self.hidden)} if self.model == "mlp" else {}
        net = build_model(self.model, X.shape[1], **options)
        algorithm = {"name": self.algorithm}
        if self.multiplier_lr is not None:
            algorithm["multiplier_lr"] = self.multiplier_lr
        trainer = {"steps": self.steps, "batch_size": self.batch_size, "log_every": 50,
                   "selection_split": "validation" if self.validation_fraction else "train"}
        result = fit_run(net, spec if grouped else dataclasses.replace(spec, constraints={}),
                         splits, protected=PROTECTED,
                         optimizer=torch.optim.Adam(net.parameters(), lr=self.lr),
                         algorithm=algorithm, trainer=trainer, seed=self.random_state,
                         tolerance=self.tolerance)
        self.results_ = estimator_results(result.results, list(spec.constraints) if not
                                          grouped else None, self.validation_fraction > 0)
        self.predictor_ = Predictor(result.extras["solutions"][self.solution],
                                    decision=decision_threshold(net), name=self.solution)
        return self

    def _input(self, X: Any, y: Any = None, *, fitting: bool = False) -> Any:
        """``validate_data`` with a hint for text columns; sparse input made dense."""
        try:
            out = validate_data(self, X, y if fitting else "no_validation",
                                dtype=np.float32, accept_sparse=True, reset=fitting)
        except ValueError as e:
            if "could not convert string to float" in str(e):
                raise ValueError(f"{e}: ConstrainedClassifier takes encoded numbers; encode "
                                 "text columns in a Pipeline first, e.g. make_pipeline("
                                 "make_column_transformer((OneHotEncoder(), [text columns]), "
                                 "remainder='passthrough'), ConstrainedClassifier(...))") from e
            raise
        if not fitting:
            return out.toarray() if scipy.sparse.issparse(out) else out
        X, y = out
        return (X.toarray() if scipy.sparse.issparse(X) else X), y

    def _splits(self, X: np.ndarray, labels: np.ndarray, codes: np.ndarray,
                names: list[str], counts: np.ndarray | None) -> DatasetSplits:
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError(f"validation_fraction={self.validation_fraction}: must lie in "
                             "[0, 1)")
        rows = np.arange(len(labels))
        held = _stratified_share(labels, codes, self.validation_fraction, self.random_state)
        train_rows = rows[~held] if held.any() else rows
        val_rows = rows[held] if held.any() else rows
        if counts is not None:      # frequency weights: each row repeated, after the split
            train_rows = np.repeat(train_rows, counts[train_rows])
            val_rows = np.repeat(val_rows, counts[val_rows])

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

    def decision_function(self, X: Any) -> np.ndarray:
        """``[n]``, positive where ``classes_[1]`` is predicted: a deterministic solution's
        margin (its score less the decision threshold, for ROC curves); for a mixture
        (randomised) ``P(predict classes_[1]) − 0.5``, ordered as :meth:`predict_proba`."""
        features = self._features(X)
        if self.predictor_.is_mixture:
            return self.predictor_.predict_proba(features).cpu().numpy() - 0.5
        margin = self.predictor_.scores(features).double() - self.predictor_.decision
        return margin.cpu().numpy()

    def predict(self, X: Any) -> np.ndarray:
        """``[n]`` labels, one member of a mixture drawn per row (seeded by
        ``random_state``)."""
        features = self._features(X)
        hit = self.predictor_.predict(features, seed=self.random_state)
        return self.classes_[hit.cpu().numpy().astype(int)]

    def _features(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "predictor_")
        return self._input(X)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        tags.non_deterministic = False
        tags.input_tags.sparse = True
        return tags

    def __getstate__(self) -> dict[str, Any]:
        """scikit-learn's state plus the fairgames version that pickled it."""
        state = dict(super().__getstate__())
        state["_fairgames_version"] = fairgames_version()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Warn when a pickle comes from another fairgames version (its solution may not
        predict the same): refit, or load it with the version that saved it."""
        state = dict(state)
        saved = state.pop("_fairgames_version", None)
        if saved is not None and saved != fairgames_version():
            warnings.warn(f"this ConstrainedClassifier was pickled by fairgames {saved}; this "
                          f"is fairgames {fairgames_version()}: its predictions may differ — "
                          "refit it, or unpickle it with fairgames " + saved, UserWarning,
                          stacklevel=2)
        super().__setstate__(state)


def _groups(sensitive_features: Any, n: int, max_groups: int
            ) -> tuple[np.ndarray, list[str]]:
    """Integer codes ``[n]`` and names of the protected attribute's values, refused as the
    CLI refuses a protected column: missing values, a single value; and more than
    ``max_groups`` values (a continuous column would make a group of every row)."""
    values = np.asarray(sensitive_features, dtype=object)
    if values.ndim != 1 or len(values) != n:
        raise ValueError(f"sensitive_features must be one value per row ({n}), got shape "
                         f"{values.shape}")
    missing = int(pd.isna(values).sum())
    if missing:
        raise ValueError(f"sensitive_features has {missing} missing value(s) (NaN or None): a "
                         "row's group must be known; fill them with a value of their own "
                         "(e.g. 'unknown') or drop those rows")
    uniques, codes = np.unique(values.astype(str), return_inverse=True)
    if len(uniques) < 2:
        raise ValueError(f"sensitive_features has the single value {str(uniques[0])!r}; a group "
                         "constraint needs at least two groups: pass an attribute with two "
                         "values or more, or fit without sensitive_features to train the "
                         "objective alone")
    if len(uniques) > max_groups:
        raise ValueError(f"sensitive_features has {len(uniques)} distinct values, more than "
                         f"max_groups={max_groups} (each value is a group with constraints of "
                         "its own): bin a continuous attribute into a few groups first (e.g. "
                         "np.digitize at its quantiles), or raise max_groups")
    return codes.astype(np.int64), [str(u) for u in uniques]


def _frequency_weights(sample_weight: Any, X: np.ndarray) -> np.ndarray | None:
    """``sample_weight`` as whole-number row counts ``[n]`` (``None``: every row once)."""
    if sample_weight is None:
        return None
    w = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
    if not np.all(np.isfinite(w)) or not np.array_equal(w, np.round(w)):
        raise ValueError("sample_weight must be whole numbers (frequency weights: a row of "
                         "weight 3 counts as three rows); fractional weights are not "
                         "supported: scale them to counts, or resample the rows")
    if w.sum() <= 0:
        raise ValueError("sample_weight is zero on every row: give some rows a weight")
    return w.astype(np.int64)


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


def estimator_results(results: dict[str, Any], families: list[str] | None,
                      held_out: bool) -> dict[str, Any]:
    """The run's record as the estimator reports it: every constraint family
    ``not_applicable`` when fitted without groups (``families``: the problem's constraint
    names); no validation or test figures without held-out rows (they would be the training
    rows'); the advice in the estimator's parameter names.

    Example:
        >>> r = {"verdict": {"constraints": {}}, "solutions": {}}
        >>> estimator_results(r, ["ppr_low"], False)["verdict"]["constraints"]["ppr_low"][
        ...     "status"]
        'not_applicable'
    """
    verdict = results["verdict"]
    if families is not None:
        verdict["constraints"] = {name: _not_applicable() for name in families}
    elif not held_out:
        for solution in results["solutions"].values():
            if isinstance(solution, dict):
                solution["validation"] = solution["test"] = None
        for entry in verdict["constraints"].values():
            _train_only(entry)
    for entry in verdict["constraints"].values():
        entry["verdict"] = estimator_hints(entry["verdict"])
    return results


def estimator_hints(text: str) -> str:
    """The run's advice with the CLI's keys put as the estimator's parameters.

    Example:
        >>> estimator_hints("try trainer.steps=400, trainer.tune=validation or "
        ...                 "problem.tolerance=0.09")
        'try steps=400, validation_fraction=0.2 or tolerance=0.09'
    """
    for pattern, replacement in _HINTS:
        text = re.sub(pattern, replacement, text)
    return text


def _not_applicable() -> dict[str, Any]:
    splits = ("train", "validation", "test")
    return {"status": "not_applicable",
            "verdict": "not applicable: fit got no sensitive_features (the objective alone "
                       "was trained)",
            "train": None, "test": None, "values": dict.fromkeys(splits),
            "intervals": dict.fromkeys(splits)}


def _train_only(entry: dict[str, Any]) -> None:
    """A verdict without held-out rows: its train figure only; met on train is not a
    verdict on new rows (``undefined``)."""
    if entry["status"] in ("met", "not_significant", "missed_on_test"):
        entry["status"] = "undefined"
        entry["verdict"] = ("met on train; not measured on new rows (validation_fraction=0: "
                            "no held-out rows)")
    entry["test"] = None
    for key in ("values", "intervals"):
        entry[key]["validation"] = entry[key]["test"] = None


@functools.cache
def fairgames_version() -> str:
    """The installed fairgames version (``"unknown"`` from a bare source tree).

    Example:
        >>> isinstance(fairgames_version(), str)
        True
    """
    try:
        from importlib.metadata import version

        return version("fairgames")
    except Exception:  # pragma: no cover - not installed
        return "unknown"
