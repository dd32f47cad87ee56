"""A device-resident minibatch sampler for tabular data (no per-example Python)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from .dataset import TabularDataset
from .errors import DataError


def _epoch_seed(seed: int, stream: int, epoch: int) -> int:
    """A well-mixed 63-bit seed for permutation ``epoch`` of ``stream``."""
    state = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, stream, epoch]).generate_state(2)
    return int((int(state[0]) << 31) ^ int(state[1])) & ((1 << 63) - 1)


class MinibatchSampler:
    """Infinite iterator of ``[B]`` int64 index tensors on the data set's device.

    Each epoch is a fresh permutation of the rows; batches are consecutive slices of it,
    so every row is seen once per epoch. The permutation of epoch ``e`` is drawn on the CPU
    from a ``torch.Generator`` seeded by ``(seed, e)`` and moved to the device once per
    epoch, so the same seed gives the same batches on every device, and a run restored by
    :meth:`load_state_dict` draws exactly the batches the original run would have drawn.

    Args:
        data: a :class:`TabularDataset` (its length, device and groups are used) or a
            number of rows.
        batch_size: rows per batch; ``None`` means the full batch (``arange(N)`` every step).
        seed: seed of the permutations.
        balanced_by: name of a protected attribute: every batch then holds
            ``batch_size // G`` rows of each of the ``G`` groups (the remainder going to the
            first groups), each group cycling through its own permutations. Use
            :meth:`importance_weights` to re-weight such a batch to the population.
        drop_last: drop the last, short batch of an epoch (unbalanced mode only).
        device: device of the index tensors when ``data`` is a number (default CPU).

    Example:
        >>> from fairgames.data import MinibatchSampler, make_synthetic
        >>> train = make_synthetic(n=1000, seed=0).train
        >>> sampler = MinibatchSampler(train, batch_size=128, seed=0)
        >>> idx = next(iter(sampler))
        >>> idx.shape, idx.device.type
        (torch.Size([128]), 'cpu')
        >>> batch = train.subset(idx)
        >>> balanced = MinibatchSampler(train, batch_size=100, balanced_by="group")
        >>> train.groups["group"][next(iter(balanced))].bincount().tolist()
        [50, 50]
    """

    def __init__(
        self,
        data: TabularDataset | int,
        batch_size: int | None = None,
        *,
        seed: int = 0,
        balanced_by: str | None = None,
        drop_last: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        if isinstance(data, TabularDataset):
            n = len(data)
            self.device = data.device if device is None else torch.device(device)
        elif isinstance(data, int) and not isinstance(data, bool):
            n = data
            self.device = torch.device("cpu" if device is None else device)
        else:
            raise DataError(f"data must be a TabularDataset or a number of rows, got "
                            f"{type(data).__name__}")
        if n < 1:
            raise DataError("cannot sample from an empty data set")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise DataError(f"batch_size must be a positive int or None, got {batch_size!r}")
        self.n = n
        self.batch_size = batch_size
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.balanced_by = balanced_by
        self._full: torch.Tensor | None = None

        if balanced_by is not None:
            self._balance(data, balanced_by, batch_size)
        self.epoch = 0
        self.position = 0
        self.steps = 0
        self._perm: torch.Tensor | None = None

    def _balance(self, data: TabularDataset | int, balanced_by: str,
                 batch_size: int | None) -> None:
        """Per-group members, per-batch quotas and the reweighting factor of balanced
        batches (each group's share of the data over its share of a batch)."""
        if not isinstance(data, TabularDataset):
            raise DataError("balanced_by needs a TabularDataset, not a number of rows")
        if balanced_by not in data.groups:
            raise DataError(f"unknown protected attribute {balanced_by!r} for balanced "
                            f"batches; known: {sorted(data.groups)}")
        if batch_size is None:
            raise DataError("balanced_by needs a batch_size (a full batch is not balanced)")
        codes = data.groups[balanced_by].cpu()
        g = len(data.group_names[balanced_by])
        if batch_size < g:
            raise DataError(f"batch_size {batch_size} is smaller than the {g} groups of "
                            f"{balanced_by!r}")
        counts = torch.bincount(codes, minlength=g)
        empty = [data.group_names[balanced_by][i] for i in range(g) if counts[i] == 0]
        if empty:
            raise DataError(f"group(s) {empty} of {balanced_by!r} have no rows; cannot "
                            "balance batches")
        order = torch.argsort(codes, stable=True)
        self._members = [t.to(self.device) for t in torch.split(order, counts.tolist())]
        self._per_group = [batch_size // g + (1 if i < batch_size % g else 0)
                           for i in range(g)]
        shares = counts.double() / self.n
        quota = torch.tensor(self._per_group, dtype=torch.float64) / batch_size
        self._factor = (shares / quota).float().to(self.device)
        self._codes = data.groups[balanced_by].to(self.device)
        self._g_epoch = [0] * g
        self._g_pos = [0] * g
        self._g_perm: list[torch.Tensor | None] = [None] * g

    # ---------------------------------------------------------------- helpers
    def _permutation(self, size: int, stream: int, epoch: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(_epoch_seed(self.seed, stream, epoch))
        perm = torch.randperm(size, generator=gen)   # drawn on the CPU: the same on any device
        if self.device.type != "cuda":
            return perm.to(self.device)
        # A copy from pageable memory makes the host wait for the device; from pinned memory
        # with non_blocking it is queued on the stream (the pinned block is kept alive by the
        # host allocator until the copy has run).
        return perm.pin_memory().to(self.device, non_blocking=True)

    @property
    def batches_per_epoch(self) -> int:
        """Batches in one pass over the rows (unbalanced mode; 1 for the full batch)."""
        if self.batch_size is None:
            return 1
        if self.drop_last:
            return max(1, self.n // self.batch_size)
        return -(-self.n // self.batch_size)

    def __iter__(self) -> Iterator[torch.Tensor]:
        return self

    def __next__(self) -> torch.Tensor:
        self.steps += 1
        if self.batch_size is None:
            if self._full is None:
                self._full = torch.arange(self.n, device=self.device)
            return self._full
        if self.balanced_by is not None:
            return self._next_balanced()
        b = self.batch_size
        if self.position >= self.n or (self.drop_last and self.n >= b
                                       and self.position + b > self.n):
            self.epoch += 1
            self.position = 0
            self._perm = None
        if self._perm is None:
            self._perm = self._permutation(self.n, 0, self.epoch)
        start = self.position
        self.position = min(self.n, start + b)
        return self._perm[start:self.position]

    def _next_balanced(self) -> torch.Tensor:
        pieces = []
        for gi, k in enumerate(self._per_group):
            members = self._members[gi]
            size = len(members)
            need = k
            while need > 0:
                if self._g_pos[gi] >= size:
                    self._g_epoch[gi] += 1
                    self._g_pos[gi] = 0
                    self._g_perm[gi] = None
                if self._g_perm[gi] is None:
                    perm = self._permutation(size, 1 + gi, self._g_epoch[gi])
                    self._g_perm[gi] = members[perm]
                take = min(need, size - self._g_pos[gi])
                start = self._g_pos[gi]
                pieces.append(self._g_perm[gi][start:start + take])
                self._g_pos[gi] += take
                need -= take
        return torch.cat(pieces)

    def importance_weights(self, index: torch.Tensor) -> torch.Tensor:
        """Per-row weights that make a balanced batch's weighted means unbiased.

        For row ``i`` of group ``g``: ``P(g) / (share of g in the batch)``; all ones when
        the sampler is not balanced.
        """
        if self.balanced_by is None:
            return torch.ones(index.shape, device=index.device)
        return self._factor[self._codes[index]]

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue with the same batches (plain Python values)."""
        state: dict[str, Any] = {
            "n": self.n,
            "batch_size": self.batch_size,
            "seed": self.seed,
            "balanced_by": self.balanced_by,
            "drop_last": self.drop_last,
            "epoch": self.epoch,
            "position": self.position,
            "steps": self.steps,
        }
        if self.balanced_by is not None:
            state["group_epochs"] = list(self._g_epoch)
            state["group_positions"] = list(self._g_pos)
            state["group_sizes"] = [len(m) for m in self._members]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`; the next batches match the original run.

        Raises:
            DataError: when the state was taken on a different data set size, batch size or
                balancing attribute.
        """
        for key in ("n", "batch_size", "balanced_by", "drop_last"):
            if state.get(key) != getattr(self, key):
                raise DataError(f"sampler state has {key}={state.get(key)!r} but this sampler "
                                f"has {key}={getattr(self, key)!r}")
        if self.balanced_by is not None:
            sizes = [len(m) for m in self._members]
            if list(state["group_sizes"]) != sizes:
                raise DataError(f"sampler state has group sizes {state['group_sizes']} but "
                                f"this data set has {sizes}")
            self._g_epoch = [int(e) for e in state["group_epochs"]]
            self._g_pos = [int(p) for p in state["group_positions"]]
            self._g_perm = [None] * len(sizes)
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self.steps = int(state["steps"])
        self._perm = None
