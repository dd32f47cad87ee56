"""A captured training step: the whole constrained step recorded once, replayed as one graph.

:meth:`ConstrainedOptimizer.capture(step) <fairgames.game.ConstrainedOptimizer.capture>`
runs ``step`` (the user-level loop body: ``zero_grad``, ``lagrangian``, ``backward``,
``step``) once eagerly if the game has not stepped yet (the first step makes lazy state:
θ's optimizer buffers, the rate plan), then once more while recording every aten op it
dispatches — model forward and backward, the fused rate pass, θ's optimizer, every player —
with ``make_fx``. The host-side work (batch
checks, the rate plan, Python dispatch of the players) runs only then; what it decides is
baked into the graph, as a CUDA graph bakes it. Every piece of state the step reads or
writes (parameters, optimizer and player state, running estimates, the step counter of the
non-finite guard) is a device tensor updated in place, so replaying the graph moves the real
state. The graph is then compiled: inductor on CPU (when a C++ compiler is found; otherwise it
is replayed op by op, with a :class:`CaptureWarning`), ``mode="reduce-overhead"`` (CUDA
graphs) on CUDA.

Static inputs, as with CUDA graphs: the step reads the tensors it read when captured. To
train on another batch, ``copy_`` it into those tensors (same shape); labels, groups and
weights copied in are re-read by every replay (the batch's cell layout is recomputed in the
graph). θ's hyper-parameters (``lr``, ...) are checked on the host before each replay: a
change (an LR scheduler) records the step again.

Example:
    >>> import torch
    >>> from fairgames.rates import Batch, error_rate, positive_prediction_rate
    >>> from fairgames.game import ConstrainedOptimizer, Problem
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <...>
    >>> x, y = torch.randn(64, 3), (torch.rand(64) < 0.5).float()
    >>> model = torch.nn.Linear(3, 1)
    >>> copt = ConstrainedOptimizer(Problem(error_rate(), [positive_prediction_rate() >= 0.4]),
    ...                             torch.optim.SGD(model.parameters(), lr=0.1))
    >>> def step():
    ...     copt.zero_grad()
    ...     copt.lagrangian(Batch(scores=model(x)[:, 0], labels=y)).backward()
    ...     copt.step()
    >>> captured = copt.capture(step, compile=False)   # records (and plays) one step
    >>> for _ in range(3):
    ...     captured()
    >>> copt.steps              # a first eager step, the recorded one, three replays
    5
"""

from __future__ import annotations

import dataclasses
import shutil
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from .fused_steps import DECOMPOSITIONS
from .history import StepRecord
from .sparse import recordable_products

if TYPE_CHECKING:
    from .optimizer import ConstrainedOptimizer


class CaptureWarning(UserWarning):
    """A captured step runs without compilation (no C++ compiler for inductor on CPU)."""


def cxx_compiler() -> str | None:
    """The C++ compiler inductor would use on CPU (``$CXX`` or the first of ``g++``,
    ``clang++``, ``c++`` on the path), or ``None``."""
    import os  # noqa: PLC0415

    for name in (os.environ.get("CXX"), "g++", "clang++", "c++"):
        if name and shutil.which(name):
            return name
    return None


def check_capturable(copt: ConstrainedOptimizer) -> None:
    """Refuse, naming the remedy, what a recorded graph would replay wrongly
    (:meth:`ConstrainedOptimizer.capture` checks it; a loop that captures later checks first)."""
    if copt._reduction is not None:
        raise ValueError("capture() of a data-parallel game (process_group=...): its "
                         "collective is not recorded; train it eagerly")
    if copt.strict:
        raise ValueError("capture() with strict=True: strict checks read values on the host "
                         "every step; capture a game made with strict=False")
    if copt._optimizer_step_pre_hooks or copt._optimizer_step_post_hooks:
        raise ValueError("capture() with optimizer step hooks: a recorded step would not call "
                         "them; remove them (register_history_hook runs on every replay)")
    opt = copt.model_optimizer
    # torch's fused kernels (Adam, AdamW, Adagrad; CPU and CUDA) keep the step count on the
    # device and read it there, as capturable=True does (CUDA only)
    if opt.defaults.get("capturable") is False and not opt.defaults.get("fused"):
        raise ValueError(f"capture() with {type(opt).__name__}(capturable=False): its step "
                         "counter is read on the host, so a recorded step would replay one "
                         f"step's bias correction forever; construct {type(opt).__name__}"
                         "(..., fused=True) (CPU or CUDA) or (..., capturable=True) (CUDA), "
                         "or use an optimizer without a step counter (SGD)")


def _hyper(opt: torch.optim.Optimizer) -> tuple:
    """θ's host-side hyper-parameters (floats, ints, bools), the replay's guard."""
    return tuple(tuple(sorted((k, v) for k, v in g.items()
                              if isinstance(v, (bool, int, float))))
                 for g in opt.param_groups)


class CapturedStep:
    """A recorded game step (see the module docstring); call it to play one more step.

    Returns what ``step`` returned (a tensor, or ``None``), from the replayed graph
    (``None`` from a call that records the step again).
    """

    def __init__(self, copt: ConstrainedOptimizer, step: Callable[[], Any], *,
                 compile: bool | None = None) -> None:
        check_capturable(copt)
        self.copt, self.step = copt, step
        self.device = copt.device
        if compile is None:
            compile = self.device.type == "cuda" or cxx_compiler() is not None
            if not compile:
                warnings.warn("capture(): no C++ compiler (g++, clang++, c++ or $CXX) found, "
                              "so inductor cannot compile the step on CPU; the recorded step "
                              "is replayed op by op. Install a C++ compiler to compile it",
                              CaptureWarning, stacklevel=3)
        self.compiled = bool(compile)
        self._counter = torch.zeros((), dtype=torch.int64, device=self.device)
        self._played = -1      # copt.steps after this graph's last call (see __call__)
        if copt.steps == 0:
            # Lazy state (θ's optimizer buffers, the guard's copies, the rate plan) is made by
            # the first step; recorded then, it would be a fresh value on every replay.
            step()
        self._record()

    def _traced(self) -> tuple[Any, list[torch.Tensor | None]]:
        out = self.step()
        record = self.copt.last
        self._counter.add_(1)
        fields = ([getattr(record, f.name) for f in dataclasses.fields(StepRecord)][1:]
                  if record is not None else [])
        return (out if isinstance(out, torch.Tensor) else None), fields

    def _record(self) -> None:
        """Record one step (it is played while recorded) and compile the graph."""
        from torch.fx.experimental.proxy_tensor import make_fx  # noqa: PLC0415

        copt = self.copt
        # The batch's layout is recomputed inside the graph, so data copied into the same
        # tensors is seen by every replay.
        copt.evaluator.forget_layout()
        self._counter.fill_(copt.steps)
        copt._step_counter = self._counter
        try:
            # inductor cannot compile the fused optimizer kernels' in-place updates of the
            # graph's constants: record them as plain ops then (fairgames.game.fused_steps)
            # sparse constraint rows are recorded as gathers and index_adds (sparse.py)
            terms = copt.terms
            with recordable_products(terms.modules() if isinstance(terms, torch.nn.Module)
                                     else vars(terms).values()):
                graph = make_fx(lambda: self._traced(), tracing_mode="real",
                                decomposition_table=DECOMPOSITIONS if self.compiled else None)()
        finally:
            copt._step_counter = None
        self._played = copt.steps
        self._hyper = _hyper(copt.model_optimizer)
        self._graph: Callable[[], Any] = graph
        if self.compiled:
            mode = "reduce-overhead" if self.device.type == "cuda" else None
            self._graph = torch.compile(graph, mode=mode, dynamic=False)

    def __call__(self) -> Any:
        copt = self.copt
        if _hyper(copt.model_optimizer) != self._hyper:
            # an LR scheduler changed θ's step: record again (that call plays the step)
            self._record()
            return None
        if copt.steps != self._played:
            # steps played outside this graph (eagerly, or by another graph recorded for
            # another batch shape): the guard's device counter catches up (a host write)
            self._counter.fill_(copt.steps)
        with torch.no_grad():
            out, fields = self._graph()
        if fields:
            copt.last = StepRecord(copt.steps, *fields)
        copt.steps += 1
        self._played = copt.steps
        for hook in copt._hooks:
            hook(copt.last)
        return out
