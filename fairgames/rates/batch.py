"""The data a rate expression is evaluated on.

A :class:`Batch` holds the model's scores with everything rates condition on: labels,
optional per-example weights, named group attributes (hard codes ``[B]`` or soft memberships
``[B, G]``), optional baseline scores (churn), source ids and example ids. Construction checks
shapes, dtypes and declared metadata, which costs no host-device sync; :meth:`Batch.check_values`
also checks the values (labels in {0, 1}, codes in range, memberships in [0, 1]) and does sync,
so whole-split evaluation calls it and a training step does not.

Example:
    >>> import torch
    >>> b = Batch(scores=torch.tensor([0.3, -1.0]), labels=torch.tensor([1.0, 0.0]),
    ...           groups={"sex": torch.tensor([0, 1])}, group_values={"sex": ["Male", "Female"]})
    >>> b.size
    2
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from .errors import NonFiniteScoresError, RatesError
from .values import code_problem, finite_problem, label_problem, weight_problem

LABEL_KINDS = ("binary", "real")


@dataclass
class Batch:
    """Scores, labels and the example factors that subsets read.

    Args:
        scores: ``[B]`` logits of a binary classifier (predicted positive iff ``s > 0``), or
            ``[R, B]`` scores of the ``R`` members of a mixture when ``mixture_weights`` is given.
        labels: ``[B]`` floats; ``0``/``1`` for ``label_kind="binary"``, in ``[0, 1]`` for
            ``"real"`` (regression).
        weights: optional ``[B]`` non-negative example weights.
        groups: attribute name → ``[B]`` integer codes (hard) or ``[B, G]`` memberships in
            ``[0, 1]`` whose rows sum to at most 1 (soft; the remainder belongs to no value).
        group_values: attribute name → the value names, in code order (required for hard
            attributes, since the number of values cannot be read without a device sync).
        baseline_scores: ``[B]`` scores of a baseline model (churn, win/loss rates).
        sources: ``[B]`` integer source ids, named by ``source_names``.
        unlabeled_sources: the names of the sources without labels (paper 001's unlabeled
            data sets): their rows' labels are never read; a rate that reads labels
            (``tpr``, ``error``, ``label=``, a group loss) over a subset that may hold their
            rows is refused when the evaluator first meets the batch's layout (no sync).
        example_ids: ``[B]`` integer ids (per-example adversaries).
        mixture_weights: ``[R]`` non-negative weights summing to 1 of a stochastic model.
        probabilities: ``[B]`` probability that each example is predicted positive, instead of
            scores (exact evaluation of a randomized classifier; no threshold events).
    """

    scores: torch.Tensor | None
    labels: torch.Tensor
    label_kind: str = "binary"
    weights: torch.Tensor | None = None
    groups: Mapping[str, torch.Tensor] = field(default_factory=dict)
    group_values: Mapping[str, Sequence[str]] = field(default_factory=dict)
    baseline_scores: torch.Tensor | None = None
    sources: torch.Tensor | None = None
    source_names: Sequence[str] | None = None
    unlabeled_sources: Sequence[str] = ()
    example_ids: torch.Tensor | None = None
    mixture_weights: torch.Tensor | None = None
    probabilities: torch.Tensor | None = None

    def __post_init__(self) -> None:
        self.groups = dict(self.groups)
        self.group_values = {k: _names(vs, k) for k, vs in dict(self.group_values).items()}
        if self.label_kind not in LABEL_KINDS:
            raise RatesError(f"label_kind must be one of {LABEL_KINDS}, got {self.label_kind!r}")
        labels = _tensor("labels", self.labels)
        if labels.dim() != 1:
            raise RatesError(f"labels must have shape [B], got {tuple(labels.shape)}")
        if not labels.is_floating_point():
            labels = labels.float()
        self.labels = labels
        b = labels.shape[0]
        if b == 0:
            raise RatesError("a batch needs at least one example (labels has shape [0])")
        self._check_predictions(b)
        if self.weights is not None:
            w = _tensor("weights", self.weights)
            _check_float("weights", w)
            if w.shape != (b,):
                raise RatesError(f"weights must have shape [{b}], got {tuple(w.shape)}")
        for name, g in self.groups.items():
            self.groups[name] = self._checked_group(name, g, b)
        self._check_extras(b)

    def _check_predictions(self, b: int) -> None:
        """Exactly one of scores (one row per example, or a mixture's ``[R, B]`` with its
        weights) and probabilities, each float ``[B]``."""
        if (self.scores is None) == (self.probabilities is None):
            raise RatesError("give exactly one of scores and probabilities")
        if self.scores is not None:
            s = _tensor("scores", self.scores)
            _check_float("scores", s)
            if self.mixture_weights is not None:
                q = _tensor("mixture_weights", self.mixture_weights)
                _check_float("mixture_weights", q)
                if s.dim() != 2 or s.shape[1] != b or q.shape != (s.shape[0],):
                    raise RatesError(
                        f"a mixture needs scores [R, B] and mixture_weights [R]; got scores "
                        f"{tuple(s.shape)}, mixture_weights {tuple(q.shape)}, B = {b}")
            elif s.shape != (b,):
                hint = " ([B, C] multiclass scores are not supported yet)" if s.dim() == 2 else ""
                raise RatesError(f"scores must have shape [B] = [{b}], got {tuple(s.shape)}{hint}")
        else:
            p = _tensor("probabilities", self.probabilities)
            _check_float("probabilities", p)
            if p.shape != (b,):
                raise RatesError(f"probabilities must have shape [{b}], got {tuple(p.shape)}")

    def _checked_group(self, name: str, g: torch.Tensor, b: int) -> torch.Tensor:
        """A group attribute as the batch keeps it: soft memberships ``[B, G]`` (float) or
        hard integer codes ``[B]`` with their value names (bool codes get ``0``/``1``)."""
        g = _tensor(f"groups[{name!r}]", g)
        if g.is_floating_point():
            if g.dim() == 1:
                if len(self.group_values.get(name, ("",))) != 1:
                    raise RatesError(_float_codes_message(name, g, self.group_values[name]))
                g = g.unsqueeze(1)
            if g.dim() != 2 or g.shape[0] != b:
                raise RatesError(f"soft group {name!r} must have shape [B, G] with B = {b}, "
                                 f"got {tuple(g.shape)}")
            if name in self.group_values and len(self.group_values[name]) != g.shape[1]:
                raise RatesError(f"group {name!r} has {g.shape[1]} columns but "
                                 f"{len(self.group_values[name])} value names (soft "
                                 "memberships have one column per value name)")
            self.group_values.setdefault(name, [str(i) for i in range(g.shape[1])])
        else:
            if g.dtype == torch.bool:
                g = g.long()
                self.group_values.setdefault(name, ["0", "1"])
            if g.shape != (b,):
                raise RatesError(f"hard group {name!r} must have shape [{b}] (integer codes), "
                                 f"got {tuple(g.shape)}")
            if name not in self.group_values:
                raise RatesError(
                    f"hard group {name!r} needs its value names in group_values "
                    f"(e.g. group_values={{{name!r}: ['a', 'b']}}); the number of values "
                    "cannot be read from the codes without a device sync")
        return g

    def _check_extras(self, b: int) -> None:
        """Baseline scores, sources (with their names) and example ids: ``[B]`` each."""
        if self.baseline_scores is not None:
            bs = _tensor("baseline_scores", self.baseline_scores)
            _check_float("baseline_scores", bs)
            if bs.shape != (b,):
                raise RatesError(f"baseline_scores must have shape [{b}], got {tuple(bs.shape)}")
        if self.sources is not None:
            src = _tensor("sources", self.sources)
            if src.is_floating_point() or src.shape != (b,):
                raise RatesError(f"sources must be integer ids of shape [{b}], got "
                                 f"{src.dtype} {tuple(src.shape)}")
            if not self.source_names:
                raise RatesError("sources needs source_names (the name of each source id)")
            self.source_names = [str(x) for x in self.source_names]
        self.unlabeled_sources = tuple(str(x) for x in self.unlabeled_sources)
        unknown = [x for x in self.unlabeled_sources if x not in (self.source_names or ())]
        if unknown:
            raise RatesError(f"unlabeled_sources {unknown} are not among the batch's "
                             f"source_names {self.source_names}: name sources of the batch "
                             "(and give sources / source_names)")
        if self.example_ids is not None:
            ids = _tensor("example_ids", self.example_ids)
            if ids.is_floating_point() or ids.shape != (b,):
                raise RatesError(f"example_ids must be integers of shape [{b}]")

    @property
    def size(self) -> int:
        return int(self.labels.shape[0])

    @property
    def device(self) -> torch.device:
        return self.labels.device

    def is_soft(self, attribute: str) -> bool:
        return self.groups[attribute].is_floating_point()

    def check_values(self) -> None:
        """Check values (syncs with the device): labels, codes, memberships, weights, NaN.

        Each error names the problem, the first offending rows with their values and the
        remedy (:mod:`fairgames.rates.values`)."""
        problem = label_problem(self.labels, self.label_kind)
        if problem is None and self.weights is not None:
            problem = weight_problem(self.weights)
        if problem is not None:
            raise RatesError(problem)
        for name, g in self.groups.items():
            if g.is_floating_point():
                ok = torch.isfinite(g).all() & (g >= 0).all() & (g.sum(1) <= 1 + 1e-5).all()
                if not bool(ok):
                    # one column: most likely integer codes given as floats
                    hint = (f"; a float [B] tensor is read as one membership column: for "
                            f"integer codes pass groups[{name!r}].long() with group_values"
                            if g.shape[1] == 1 else "")
                    raise RatesError(f"soft group {name!r}: memberships must lie in [0, 1] and "
                                     f"each row must sum to at most 1{hint}")
            else:
                problem = code_problem(g, self.group_values[name], name)
                if problem is not None:
                    raise RatesError(problem)
        if self.sources is not None:
            n = len(self.source_names or [])
            if not bool(((self.sources >= 0) & (self.sources < n)).all()):
                raise RatesError(f"sources must lie in 0..{n - 1}")
        if self.scores is not None:
            s = self.scores.detach()
            problem = finite_problem(
                s.T if s.dim() == 2 else s, "scores contain NaN or inf",
                "the model produced them: lower the learning rate, clip the gradients, or "
                "look for NaN/inf in the features")
            if problem is not None:
                raise NonFiniteScoresError(problem)
        if self.probabilities is not None:
            p = self.probabilities
            if not bool(((p >= 0) & (p <= 1)).all()):
                raise RatesError("probabilities must lie in [0, 1]")
        if self.mixture_weights is not None:
            q = self.mixture_weights.detach().to(torch.float64)
            if not (bool((q >= 0).all()) and abs(float(q.sum()) - 1.0) <= 1e-5):
                raise RatesError(f"mixture_weights must be non-negative and sum to 1 (they "
                                 f"weigh the members' expectations); got sum "
                                 f"{float(q.sum()):.6g}, min {float(q.min()):.6g}: divide "
                                 "them by their sum")

    def signature(self) -> tuple:
        """Everything about the batch's layout that a compiled evaluation plan depends on."""
        return (
            self.label_kind,
            tuple(sorted((k, self.is_soft(k), tuple(v)) for k, v in self.group_values.items()
                         if k in self.groups)),
            self.baseline_scores is not None,
            tuple(self.source_names) if self.sources is not None else None,
            self.unlabeled_sources,
            str(self.device),
        )


# id(sequence) → (the sequence, its names as a tuple): a loop that passes the same list of
# value names every step converts it once (the tuple also detects a list changed in place).
_NAMES: dict[int, tuple[object, tuple[str, ...]]] = {}
_NAMES_LIMIT = 256


def split_batches(split: Batch | Iterable[Batch], owner: str) -> tuple[Batch, Iterator[Batch]]:
    """A whole split given as one batch or as its chunks: ``(first batch, every batch)``
    (the first one tells the device and the layout). ``owner`` names the caller in the
    error for an empty split.

    Example:
        >>> b = Batch(scores=torch.zeros(3), labels=torch.zeros(3))
        >>> first, every = split_batches([b, b], "ExactEvaluator")
        >>> first is b, len(list(every))
        (True, 2)
    """
    batches = iter([split] if isinstance(split, Batch) else split)
    first = next(batches, None)
    if first is None:
        raise RatesError(f"{owner} got no batch (an empty split?)")
    return first, itertools.chain([first], batches)


def _names(values: Sequence[object], attribute: str) -> list[str]:
    """``[str(v) for v in values]``, cached by identity for sequences of ``str`` (checked
    once, when they enter the cache: each name must be unique)."""
    hit = _NAMES.get(id(values))
    if hit is not None and hit[0] is values and hit[1] == tuple(values):
        return list(hit[1])
    names = [str(v) for v in values]
    _check_unique(names, attribute)
    if len(_NAMES) >= _NAMES_LIMIT:
        _NAMES.clear()
    _NAMES[id(values)] = (values, tuple(names))   # holds the sequence: its id stays unique
    return names


def _check_unique(names: list[str], attribute: str) -> None:
    """Refuse a repeated value name: a subset names a value, and a repeated name would read
    its first code only (the other code's rows could never be selected)."""
    first: dict[str, int] = {}
    for code, name in enumerate(names):
        if name in first:
            raise RatesError(
                f"group_values[{attribute!r}] repeats the value name {name!r} (codes "
                f"{first[name]} and {code}): a subset could only select code {first[name]}; "
                f"give each code its own name (got {names}), or recode the attribute so that "
                "rows of one value share one code")
        first[name] = code


def _float_codes_message(name: str, g: torch.Tensor, values: Sequence[str]) -> str:
    """A float ``[B]`` group with several value names: integer codes given as floats (a
    soft attribute is ``[B, G]``, one column per value name)."""
    return (f"group {name!r} is a float tensor of shape {tuple(g.shape)} with "
            f"{len(values)} value names {list(values)}: integer codes were probably meant: "
            f"pass groups[{name!r}].long() (hard codes 0..{len(values) - 1}); soft memberships "
            f"must be a float [B, {len(values)}] tensor, one column per value name, in [0, 1] "
            "with rows summing to at most 1")


def _tensor(name: str, x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise RatesError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    # a meta tensor has a shape and no values: every rate of it would be arbitrary. The
    # device is a Python attribute, so this costs no host-device sync.
    if x.device.type == "meta":
        raise RatesError(
            f"{name} is on the meta device (a shape without values, e.g. from a model built "
            "under torch.device('meta')), so its rates would be arbitrary: materialise the "
            "model first, model.to_empty(device=...), then initialise its parameters "
            "(reset_parameters(), or load_state_dict(..., assign=True) from a checkpoint)")
    return x


def _check_float(name: str, x: torch.Tensor) -> None:
    if not x.is_floating_point():
        raise RatesError(f"{name} must be a floating-point tensor, got {x.dtype}")
