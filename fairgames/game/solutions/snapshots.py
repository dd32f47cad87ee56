"""Snapshots of a model's iterates θ_t, for the stochastic and best-iterate solutions.

Paper 000's guarantees (Theorems 1–4) hold for the uniform mixture of the iterates θ_1..θ_T,
and the best-iterate heuristic picks one of them; both need the iterates kept. The recorder
copies every parameter and buffer every ``every`` steps into storage allocated once
(``[capacity, *shape]`` per tensor), on the tensor's own device or in pinned host memory with
``non_blocking`` copies, so a training step never waits for it.

Capacity is capped in one of two ways:

* ``"reservoir"``: reservoir sampling (Vitter's algorithm R) over all offered snapshots, so the
  kept set is a uniform random sample of them, and a uniform mixture over it is an unbiased
  estimate of the uniform mixture of iterates.
* ``"uniform_stride"``: keep offers ``0, s, 2s, ...``; when full, drop every other one and
  double ``s`` — a fixed budget of evenly spaced iterates over the whole run.

Where in its window of ``every`` steps a snapshot is taken (``offset``):

* ``"random"`` (default): at a seeded random step of each window ``(k·every, (k+1)·every]``,
  drawn afresh per window. A game that cycles (a best-response θ-player whose iterates
  alternate every step, a multiplier that overshoots with a fixed period) is then seen in
  every phase: with a fixed offset and a period dividing ``every``, every snapshot lands on
  the same phase and both mixtures and the best iterate see one side of the cycle only.
* ``"fixed"``: at the last step of each window (steps ``every, 2·every, ...``), the recorder's
  behaviour before the offsets, for protocols published with it.

Which snapshot lives in which slot is host bookkeeping (Python lists), so nothing reads a device
value. The reservoir draws and the offsets come from seeded host PRNGs
(``numpy.random.Generator``, one stream each, their states in :meth:`state_dict`): a
``torch.Generator`` draw needs ``.item()`` to become a slot index or a step, which the no-sync
guard rightly refuses inside a training step.

Example:
    >>> import torch
    >>> model = torch.nn.Linear(3, 1)
    >>> rec = SnapshotRecorder(model, every=2, capacity=4, strategy="uniform_stride",
    ...                        offset="fixed")
    >>> for _ in range(16):
    ...     with torch.no_grad():
    ...         _ = model.weight.add_(1.0)
    ...     _ = rec.step()
    >>> rec.steps
    [2, 6, 10, 14]
    >>> rec.stacked()["weight"].shape
    torch.Size([4, 1, 3])
    >>> rec = SnapshotRecorder(model, every=4, capacity=10)     # one step in each window of 4
    >>> for _ in range(16):
    ...     _ = rec.step()
    >>> [(s - 1) // 4 for s in rec.steps]
    [0, 1, 2, 3]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

STRATEGIES = ("reservoir", "uniform_stride")
OFFSETS = ("random", "fixed")
# The offsets' PRNG stream: its own, so that the reservoir's draws do not depend on the offsets.
_OFFSET_STREAM = 0x5EED_0FF5


def model_state(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` of every parameter then every buffer, as ``functional_call`` names
    them (tied parameters once)."""
    yield from model.named_parameters()
    yield from model.named_buffers()


class SnapshotRecorder:
    """Keeps up to ``capacity`` copies of a model's parameters and buffers.

    Args:
        model: the module whose state is copied (read afresh at every snapshot, so moving or
            re-wrapping parameters in place is fine).
        every: take a snapshot every ``every`` calls of :meth:`step` (after the update).
        capacity: the most snapshots kept.
        strategy: ``"reservoir"`` or ``"uniform_stride"`` (see the module docstring).
        seed: seed of the reservoir's and the offsets' host PRNGs.
        offset: ``"random"`` or ``"fixed"`` step of each window (see the module docstring).
        device: where to store the copies; ``None`` keeps each on its tensor's device,
            ``"cpu"`` stores them in host memory (pinned when the model is on a GPU, so the
            copies are asynchronous).
    """

    def __init__(self, model: nn.Module, every: int, capacity: int,
                 strategy: str = "reservoir", *, seed: int = 0,
                 device: torch.device | str | None = None, offset: str = "random") -> None:
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive integer, got {every!r}")
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        if offset not in OFFSETS:
            raise ValueError(f"offset must be one of {OFFSETS}, got {offset!r}")
        self.model, self.every, self.capacity, self.strategy = model, every, capacity, strategy
        self.offset = offset
        self.seed = int(seed)
        state = list(model_state(model))
        if not state:
            raise ValueError("the model has no parameters or buffers to snapshot")
        self.names = [n for n, _ in state]
        self.storage: dict[str, torch.Tensor] = {}
        for name, t in state:
            dev = t.device if device is None else torch.device(device)
            pin = dev.type == "cpu" and t.device.type == "cuda"
            self.storage[name] = torch.empty((capacity, *t.shape), dtype=t.dtype, device=dev,
                                             pin_memory=pin)
        self._rng = np.random.default_rng(self.seed)
        self._offset_rng = np.random.default_rng([self.seed, _OFFSET_STREAM])
        self.steps_taken = 0       # calls of step()
        self.due = self._due_in_window(0)   # the step of the next snapshot
        self.offers = 0            # snapshots offered (taken or not)
        self.stride = 1            # uniform_stride: keep offers with index % stride == 0
        self._slot_step: list[int | None] = [None] * capacity   # training step held per slot
        self._slot_offer: list[int | None] = [None] * capacity  # offer index held per slot
        self._pending: list[Any] = []                           # CUDA events of async copies

    # ------------------------------------------------------------------ recording
    def step(self) -> bool:
        """Count one training step; snapshot at the window's chosen step (``offset``).

        Returns whether a snapshot was written (a host value; nothing is read from the device).
        """
        self.steps_taken += 1
        if self.steps_taken != self.due:
            return False
        self.due = self._due_in_window((self.steps_taken - 1) // self.every + 1)
        return self.offer()

    def _due_in_window(self, k: int) -> int:
        """The step snapshotted in window ``k``, the steps ``k·every + 1 .. (k+1)·every``."""
        if self.offset == "fixed":
            return (k + 1) * self.every
        return k * self.every + 1 + int(self._offset_rng.integers(0, self.every))

    def offer(self) -> bool:
        """Offer the model's current state as a snapshot now; returns whether it was kept."""
        n = self.offers
        self.offers += 1
        slot = self._choose_slot(n)
        if slot is None:
            return False
        self._write(slot)
        self._slot_step[slot] = self.steps_taken
        self._slot_offer[slot] = n
        return True

    def _choose_slot(self, n: int) -> int | None:
        free = [i for i, s in enumerate(self._slot_offer) if s is None]
        if self.strategy == "reservoir":
            if free:
                return free[0]
            j = int(self._rng.integers(0, n + 1))   # keep with probability capacity / (n + 1)
            return j if j < self.capacity else None
        if n % self.stride:
            return None
        if not free:
            # Thin: keep every other kept offer (those divisible by 2·stride), free the rest.
            self.stride *= 2
            for i, o in enumerate(self._slot_offer):
                if o is not None and o % self.stride:
                    self._slot_offer[i] = self._slot_step[i] = None
            if n % self.stride:
                return None
            free = [i for i, s in enumerate(self._slot_offer) if s is None]
        return free[0]

    @torch.no_grad()
    def _write(self, slot: int) -> None:
        state = dict(model_state(self.model))
        if list(state) != self.names:
            raise RuntimeError("the model's parameters/buffers changed since the recorder was "
                               f"created: expected {self.names}, got {list(state)}")
        to_host = False
        for name, t in state.items():
            dst = self.storage[name]
            if tuple(dst.shape[1:]) != tuple(t.shape):
                raise RuntimeError(f"{name} changed shape from {tuple(dst.shape[1:])} to "
                                   f"{tuple(t.shape)} since the recorder was created")
            dst[slot].copy_(t.detach(), non_blocking=True)
            to_host = to_host or (t.device.type == "cuda" and dst.device.type == "cpu")
        if to_host:
            # Host reads of pinned storage must wait for these asynchronous copies (_wait).
            # Copies on one stream complete in order, so the latest event covers them all.
            event = torch.cuda.Event()
            event.record()
            self._pending = [event]

    def _wait(self) -> None:
        for event in self._pending:
            event.synchronize()
        self._pending.clear()

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return sum(s is not None for s in self._slot_offer)

    def _order(self) -> list[int]:
        kept = [i for i, s in enumerate(self._slot_step) if s is not None]
        return sorted(kept, key=lambda i: (self._slot_step[i], i))

    @property
    def steps(self) -> list[int]:
        """Training step of each kept snapshot, increasing."""
        return [int(self._slot_step[i]) for i in self._order()]  # type: ignore[arg-type]

    def stacked(self, device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
        """The kept snapshots as ``{name: [count, *shape]}``, in step order (waits for copies).

        Raises ``ValueError`` if no snapshot was taken yet.
        """
        order = self._order()
        if not order:
            raise ValueError("no snapshot has been taken yet (call step() during training, or "
                             "offer() to record the current state)")
        self._wait()
        out = {}
        for name, store in self.storage.items():
            idx = torch.tensor(order, device=store.device)
            t = store.index_select(0, idx)
            out[name] = t if device is None else t.to(device)
        return out

    def to_stochastic_model(self, weights: torch.Tensor | None = None,
                            template: nn.Module | None = None):
        """The mixture of the kept snapshots (uniform by default) as a ``StochasticModel``."""
        from .stochastic import StochasticModel

        return StochasticModel(template if template is not None else self.model, self.stacked(),
                               weights, steps=self.steps)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue recording exactly: kept tensors, slots, PRNG state."""
        kept = [i for i, s in enumerate(self._slot_offer) if s is not None]
        self._wait()
        tensors = {}
        for name, store in self.storage.items():
            idx = torch.tensor(kept, dtype=torch.long, device=store.device)
            tensors[name] = store.index_select(0, idx).cpu()
        return {
            "strategy": self.strategy, "every": self.every, "capacity": self.capacity,
            "offset": self.offset, "due": self.due,
            "offset_rng": self._offset_rng.bit_generator.state, "seed": self.seed,
            "steps_taken": self.steps_taken, "offers": self.offers,
            "stride": self.stride, "slots": kept,
            "slot_step": [self._slot_step[i] for i in kept],
            "slot_offer": [self._slot_offer[i] for i in kept],
            "rng": self._rng.bit_generator.state, "tensors": tensors,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output into this recorder's preallocated storage."""
        state = {"offset": "fixed", **state}     # written before the offsets: fixed ones
        for key in ("strategy", "every", "capacity", "offset"):
            if state[key] != getattr(self, key):
                raise ValueError(f"snapshot state has {key}={state[key]!r} but this recorder "
                                 f"has {key}={getattr(self, key)!r}")
        if sorted(state["tensors"]) != sorted(self.names):
            raise ValueError(f"snapshot state holds {sorted(state['tensors'])}, the model has "
                             f"{sorted(self.names)}")
        slots = [int(i) for i in state["slots"]]
        if any(not 0 <= i < self.capacity for i in slots):
            raise ValueError("snapshot state has slot indices outside the capacity")
        with torch.no_grad():
            for name, store in self.storage.items():
                src = state["tensors"][name]
                if tuple(src.shape) != (len(slots), *store.shape[1:]):
                    raise ValueError(f"snapshot state of {name} has shape {tuple(src.shape)}, "
                                     f"expected {(len(slots), *store.shape[1:])}")
                if slots:
                    idx = torch.tensor(slots, dtype=torch.long, device=store.device)
                    store.index_copy_(0, idx, src.to(store.device, store.dtype))
        self.seed = int(state["seed"])
        self.steps_taken, self.offers = int(state["steps_taken"]), int(state["offers"])
        self.stride = int(state["stride"])
        self._slot_step = [None] * self.capacity
        self._slot_offer = [None] * self.capacity
        for i, s, o in zip(slots, state["slot_step"], state["slot_offer"], strict=True):
            self._slot_step[i], self._slot_offer[i] = int(s), int(o)
        self._rng = np.random.default_rng()
        self._rng.bit_generator.state = state["rng"]
        if "offset_rng" in state:
            self._offset_rng.bit_generator.state = state["offset_rng"]
        self.due = int(state.get("due", (self.steps_taken // self.every + 1) * self.every))
