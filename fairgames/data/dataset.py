"""The tabular data set container shared by every loader and by the synthetic generator."""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field, replace
from typing import Any

import torch

from fairgames.rates.values import code_problem, finite_problem, label_problem

from .errors import DataError

LABEL_KINDS = ("binary", "real")


@dataclass
class TabularDataset:
    """Features, labels and named protected attributes of one split, as tensors.

    Attributes:
        features: ``[N, D]`` float32 feature matrix (already encoded and scaled).
        labels: ``[N]`` float32; 0/1 when ``label_kind == "binary"``, values in [0, 1]
            when ``label_kind == "real"``.
        label_kind: ``"binary"`` or ``"real"``.
        groups: protected attribute name -> ``[N]`` int64 codes ``0..G-1``.
        group_names: attribute name -> value names, ``group_names[a][code]``.
        feature_names: one name per feature column.
        label_name: what the label is (e.g. ``"income>50K"``).
        name: the data set's name.
        sources: ``[N]`` int64 ids of the source data set of each row (several data sets in
            one problem, paper 001), named by ``source_names``; ``None``: one data set.
        source_names: the name of each source id (``source_names[id]``).
        unlabeled: the sources without labels (their rows' labels are 0 and never read: a
            rate conditioned on the label over such a source is refused).
        validate: check the values once, here, where the data enters (features finite,
            labels 0/1 or in [0, 1], group codes in range; one host sync): a training step
            then never has to. ``False`` only for rows of a data set already checked
            (:meth:`subset`, :meth:`to` pass it).

    Example:
        >>> import torch
        >>> ds = TabularDataset(
        ...     features=torch.zeros(4, 2), labels=torch.tensor([1.0, 0.0, 1.0, 1.0]),
        ...     label_kind="binary", groups={"sex": torch.tensor([0, 0, 1, 1])},
        ...     group_names={"sex": ["Female", "Male"]}, feature_names=["a", "b"],
        ...     label_name="y")
        >>> ds.base_rates()["sex"]
        {'Female': 0.5, 'Male': 1.0}
    """

    features: torch.Tensor
    labels: torch.Tensor
    label_kind: str
    groups: dict[str, torch.Tensor]
    group_names: dict[str, list[str]]
    feature_names: list[str]
    label_name: str
    name: str = ""
    sources: torch.Tensor | None = None
    source_names: list[str] | None = None
    unlabeled: tuple[str, ...] = ()
    validate: InitVar[bool] = True

    def __post_init__(self, validate: bool = True) -> None:
        f, y = self.features, self.labels
        if not isinstance(f, torch.Tensor) or f.dim() != 2:
            raise DataError(f"features must be a 2-d tensor [N, D], got {_describe(f)}")
        if f.dtype != torch.float32:
            raise DataError(f"features must be float32, got {f.dtype}")
        n = f.shape[0]
        if not isinstance(y, torch.Tensor) or y.shape != (n,):
            raise DataError(f"labels must be a tensor of shape [{n}], got {_describe(y)}")
        if y.dtype != torch.float32:
            raise DataError(f"labels must be float32, got {y.dtype}")
        if self.label_kind not in LABEL_KINDS:
            raise DataError(f"label_kind must be one of {LABEL_KINDS}, got {self.label_kind!r}")
        if len(self.feature_names) != f.shape[1]:
            raise DataError(
                f"{len(self.feature_names)} feature names for {f.shape[1]} feature columns"
            )
        if set(self.groups) != set(self.group_names):
            raise DataError(
                f"groups {sorted(self.groups)} and group_names {sorted(self.group_names)} "
                "must name the same attributes"
            )
        for attr, codes in self.groups.items():
            if not isinstance(codes, torch.Tensor) or codes.shape != (n,):
                raise DataError(f"group codes of {attr!r} must have shape [{n}], got "
                                f"{_describe(codes)}")
            if codes.dtype != torch.int64:
                raise DataError(f"group codes of {attr!r} must be int64, got {codes.dtype}")
            if codes.device != f.device or y.device != f.device:
                raise DataError("features, labels and group codes must be on one device")
        self._check_sources(n)
        if validate:
            self._check_values()

    def _check_sources(self, n: int) -> None:
        """The source ids' shape, dtype and names (their values: :meth:`_check_values`)."""
        src, names = self.sources, self.source_names
        if src is None:
            if names is not None or self.unlabeled:
                raise DataError("source_names / unlabeled need sources (the [N] source ids)")
            return
        if not isinstance(src, torch.Tensor) or src.shape != (n,) or src.dtype != torch.int64:
            raise DataError(f"sources must be an int64 tensor of shape [{n}], got "
                            f"{_describe(src)}")
        if src.device != self.features.device:
            raise DataError("sources must be on the features' device")
        if not names or len(set(names)) != len(names):
            raise DataError(f"sources need one distinct name per source id, got {names!r}")
        self.source_names = [str(x) for x in names]
        self.unlabeled = tuple(str(x) for x in self.unlabeled)
        unknown = sorted(set(self.unlabeled) - set(self.source_names))
        if unknown:
            raise DataError(f"unlabeled source(s) {unknown} are not among the sources "
                            f"{self.source_names}")

    def _check_values(self) -> None:
        """Labels, group codes and features checked once (one pass each, syncs)."""
        where = f" of data set {self.name!r}" if self.name else ""
        problems = [label_problem(self.labels, self.label_kind)]
        problems += [code_problem(codes, self.group_names[attr], attr, names_field="group_names")
                     for attr, codes in self.groups.items()]
        if self.sources is not None:
            problems.append(code_problem(self.sources, self.source_names or [], "source",
                                         names_field="source_names"))
        problems.append(finite_problem(
            self.features, "features must be finite (no NaN or inf)",
            "impute the missing values (or drop those rows) before building the data set",
            columns=self.feature_names))
        problems = [p for p in problems if p is not None]
        if problems:
            raise DataError(f"bad values{where}: " + "; and ".join(problems))

    # ------------------------------------------------------------------ basics
    def __len__(self) -> int:
        return int(self.features.shape[0])

    @property
    def device(self) -> torch.device:
        """The device every tensor of this data set lives on."""
        return self.features.device

    @property
    def num_features(self) -> int:
        """Number of feature columns ``D``."""
        return int(self.features.shape[1])

    def to(self, device: torch.device | str) -> TabularDataset:
        """A copy with every tensor on ``device`` (the same object if already there).

        Example:
            >>> from fairgames.data import make_synthetic
            >>> ds = make_synthetic(n=50).train
            >>> ds.to("cpu").device.type
            'cpu'
        """
        device = torch.device(device)
        if self.features.device == device:
            return self
        return replace(
            self,
            features=self.features.to(device),
            labels=self.labels.to(device),
            groups={k: v.to(device) for k, v in self.groups.items()},
            sources=self.sources.to(device) if self.sources is not None else None,
            validate=False,      # the same values, already checked
        )

    def subset(self, index: torch.Tensor) -> TabularDataset:
        """The rows selected by ``index`` (int64 indices or a bool mask), as a new data set.

        Example:
            >>> import torch
            >>> from fairgames.data import make_synthetic
            >>> ds = make_synthetic(n=100).train
            >>> len(ds.subset(torch.arange(10)))
            10
        """
        if not isinstance(index, torch.Tensor):
            index = torch.as_tensor(index)
        if index.dtype == torch.bool:
            if index.shape != (len(self),):
                raise DataError(f"a bool mask must have shape [{len(self)}], got "
                                f"{tuple(index.shape)}")
        elif index.dtype not in (torch.int64, torch.int32):
            raise DataError(f"index must be an int64 tensor or a bool mask, got {index.dtype}")
        index = index.to(self.device)
        return replace(
            self,
            features=self.features[index],
            labels=self.labels[index],
            groups={k: v[index] for k, v in self.groups.items()},
            sources=self.sources[index] if self.sources is not None else None,
            validate=False,      # rows of a checked data set (no sync per minibatch)
        )

    # ------------------------------------------------------------------ groups
    def _check_attribute(self, attribute: str) -> None:
        if attribute not in self.groups:
            raise DataError(
                f"unknown protected attribute {attribute!r} for data set {self.name!r}; "
                f"known: {sorted(self.groups)}"
            )

    def group_masks(self, attribute: str) -> dict[str, torch.Tensor]:
        """Value name -> ``[N]`` bool mask of the rows in that group of ``attribute``.

        Example:
            >>> from fairgames.data import make_synthetic
            >>> masks = make_synthetic(n=100).train.group_masks("group")
            >>> sorted(masks)
            ['0', '1']
        """
        self._check_attribute(attribute)
        codes = self.groups[attribute]
        return {name: codes == i for i, name in enumerate(self.group_names[attribute])}

    def group_counts(self, attribute: str) -> dict[str, int]:
        """Value name -> number of rows in that group."""
        self._check_attribute(attribute)
        g = len(self.group_names[attribute])
        counts = torch.bincount(self.groups[attribute].cpu(), minlength=g).tolist()
        return dict(zip(self.group_names[attribute], counts, strict=True))

    def source_counts(self) -> dict[str, int]:
        """Source name -> number of rows from it (``{}`` for one data set).

        Example:
            >>> from fairgames.data import make_synthetic
            >>> make_synthetic(n=100).train.source_counts()
            {}
        """
        if self.sources is None:
            return {}
        names = self.source_names or []
        counts = torch.bincount(self.sources.cpu(), minlength=len(names)).tolist()
        return dict(zip(names, counts, strict=True))

    def base_rates(self) -> dict[str, Any]:
        """Mean label overall and per group of every attribute (NaN for an empty group).

        For binary labels this is the positive rate. Returns
        ``{"overall": float, attribute: {value name: float}, ...}``.
        """
        y = self.labels.detach().double().cpu()
        out: dict[str, Any] = {"overall": float(y.mean()) if len(y) else float("nan")}
        for attr, codes in self.groups.items():
            g = len(self.group_names[attr])
            c = codes.cpu()
            sums = torch.zeros(g, dtype=torch.float64).index_add_(0, c, y)
            cnts = torch.bincount(c, minlength=g).double()
            rates = (sums / cnts).tolist()
            out[attr] = dict(zip(self.group_names[attr], rates, strict=True))
        return out


def _describe(x: object) -> str:
    if isinstance(x, torch.Tensor):
        return f"tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    return type(x).__name__


@dataclass
class DatasetSplits:
    """Train / validation / test splits of one data set, with provenance metadata.

    ``metadata`` holds at least ``name``, ``paper`` (whose preprocessing was followed),
    ``preprocessing`` (a description), ``split`` and ``seed``; loaders of real data add
    ``sources`` (file path, origin and sha256 of every raw file read).

    Example:
        >>> from fairgames.data import make_synthetic
        >>> splits = make_synthetic(n=1000, seed=1)
        >>> len(splits.train) + len(splits.validation) + len(splits.test)
        1000
    """

    train: TabularDataset
    validation: TabularDataset
    test: TabularDataset
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Each split checked its own values; a group code means the same value in all three
        # only when they share the value names (and a model fits all three only with one
        # feature layout and label kind).
        for part, ds in self.items():
            if not isinstance(ds, TabularDataset):
                raise DataError(f"the {part} split must be a TabularDataset, got "
                                f"{type(ds).__name__}")
        train = self.train
        for part, ds in self.items()[1:]:
            for what, mine, theirs in (
                    ("label_kind", train.label_kind, ds.label_kind),
                    ("feature_names", train.feature_names, ds.feature_names),
                    ("group_names", train.group_names, ds.group_names),
                    ("source_names", train.source_names, ds.source_names),
                    ("unlabeled", train.unlabeled, ds.unlabeled)):
                if mine != theirs:
                    raise DataError(f"the {part} split's {what} {theirs!r} differ from the "
                                    f"train split's {mine!r}; build every split with the same "
                                    "encoders (one value name per group code in all three)")

    def to(self, device: torch.device | str) -> DatasetSplits:
        """All three splits moved to ``device``."""
        return replace(
            self,
            train=self.train.to(device),
            validation=self.validation.to(device),
            test=self.test.to(device),
        )

    def __iter__(self):
        """Iterate ``train, validation, test`` (so ``tr, va, te = splits`` works)."""
        return iter((self.train, self.validation, self.test))

    def items(self) -> list[tuple[str, TabularDataset]]:
        """``[("train", ...), ("validation", ...), ("test", ...)]``."""
        return [("train", self.train), ("validation", self.validation), ("test", self.test)]
