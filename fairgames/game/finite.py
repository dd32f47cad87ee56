"""Non-finite steps: found on the device, skipped by every player, reported at log time.

A NaN or ±inf score, example weight, loss or gradient must not reach the model's weights or
the multipliers, yet testing for one on the host in every step would force a host-device
sync. :class:`FiniteGuard` does what AMP's ``GradScaler`` does with ``found_inf``, on the
device: each :meth:`~fairgames.game.ConstrainedOptimizer.lagrangian` call notes one sum of the
batch's scores (NaN and inf stick in a sum) and of its weights (a negative weight counts as
non-finite); at ``step`` the guard copies θ's parameters and optimizer state before θ plays,
then tests the notes, the recorded loss and the gradients' largest magnitude in one
``isfinite``, and ``ok`` — a device boolean — masks every update: θ's parameters and
optimizer state are put back with ``torch.where`` (bit for bit), and the other players skip
their step through the round's ``ok`` (as for a step the GradScaler skipped). The first bad
step and what was non-finite in it stay on the device until :meth:`FiniteGuard.check` reads
them (one sync, meant for log intervals) and raises :class:`NonFiniteStepError`.

The evaluator's running estimates (the subsets' proportions) are put back too; its host
copy of the estimates' bias correction still counts the skipped step (a small bias of the
fallback denominator of a near-empty subset for the next few hundred steps; reset when a
state dict is loaded). The restore is exact for every tensor of θ's optimizer on the game's
device. State that
appears at a skipped step (torch optimizers create theirs at the first step) is reset to
zero, which is how Adam, AdamW, RMSprop and SGD (without dampening) start theirs; a step
counter kept on the host (a non-capturable torch Adam with a model on a GPU) cannot be
reset without a sync and still counts the skipped step (``capturable=True`` or
``fused=True`` keep it on the device).

Example:
    >>> import torch
    >>> from fairgames.rates import Batch, error_rate
    >>> from fairgames.game import ConstrainedOptimizer, Problem
    >>> model = torch.nn.Linear(2, 1)
    >>> copt = ConstrainedOptimizer(Problem(error_rate()), torch.optim.SGD(model.parameters(), 0.1))
    >>> x, y = torch.randn(8, 2), (torch.rand(8) < 0.5).float()
    >>> x[3, 0] = float("nan")                     # a NaN feature: NaN scores, NaN gradients
    >>> before = model.weight.detach().clone()
    >>> copt.zero_grad()
    >>> copt.lagrangian(Batch(scores=model(x)[:, 0], labels=y)).backward()
    >>> copt.step()                                # no sync, no error: the step is skipped
    >>> torch.equal(model.weight, before)
    True
    >>> try:
    ...     copt.check()                           # one sync, at a log interval
    ... except NonFiniteStepError as e:
    ...     print(e.step, e.kinds)
    0 ('scores', 'loss', 'gradients')
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from fairgames.rates import Batch, NonFiniteScoresError

KINDS = ("scores", "weights", "loss", "gradients")
"""What a step's finiteness test looks at, in the order of :attr:`FiniteGuard.kinds`."""
_NO_STATE: dict = {}     # a parameter's optimizer state when it has none (never written)


class NonFiniteStepError(NonFiniteScoresError):
    """A training step met a NaN or infinite score, weight, loss or gradient (and was skipped).

    Attributes:
        step: the first bad step (0-based, as :attr:`~fairgames.game.StepRecord.step`).
        kinds: what was non-finite at that step (a subset of :data:`KINDS`).
        count: how many steps were skipped since the last check.

    Example:
        >>> e = NonFiniteStepError("bad", step=3, kinds=("loss",), count=1)
        >>> isinstance(e, NonFiniteScoresError), e.step
        (True, 3)
    """

    def __init__(self, message: str, *, step: int, kinds: Sequence[str] = (),
                 count: int = 1) -> None:
        super().__init__(message)
        self.step, self.kinds, self.count = step, tuple(kinds), count


class FiniteGuard:
    """The device flag of non-finite steps and the masked restore of θ (see the module)."""

    def __init__(self, device: torch.device, estimates: torch.nn.Module | None = None) -> None:
        self.device = device
        self._module = estimates
        self._estimates: list[torch.Tensor] = []
        self._estimates_saved: list[torch.Tensor] = []
        self.first_bad = torch.full((), -1, dtype=torch.int64, device=device)
        # The tested values of the first bad step (scores, weights, loss, each gradient's
        # largest magnitude), read by check() to say what was non-finite.
        self.values = torch.zeros(3, device=device)
        self.count = torch.zeros((), dtype=torch.int64, device=device)
        # The first bad step's negative weights: (how many, the first row); a negative weight
        # is finite, so check() names it apart from NaN/inf and says weights must be >= 0.
        self.negative = torch.zeros(2, dtype=torch.int64, device=device)
        self._negative: torch.Tensor | None = None
        self._zero = torch.zeros((), device=device)
        self._scores: torch.Tensor | None = None
        self._weights: torch.Tensor | None = None
        self._saved: dict[tuple, torch.Tensor] = {}

    # ------------------------------------------------------------------ per batch
    def note(self, batch: Batch) -> None:
        """Note a batch's scores and weights (two device ops, no sync); the first note of a
        step also copies the running estimates the batch's pass is about to update."""
        if self._scores is None:
            self._save_estimates()
        s = batch.scores if batch.scores is not None else batch.probabilities
        assert s is not None
        with torch.no_grad():
            total = torch.sum(s, dtype=torch.float32)
            self._scores = total if self._scores is None else self._scores + total
            w = batch.weights
            if w is not None:
                found = _negative_rows(w)
                # sum: NaN and +inf stick; ÷ (no negative): a negative weight makes it ±inf
                # or NaN (÷ True is ÷ 1: a valid batch's note is its sum, bit for bit)
                total = torch.sum(w, dtype=torch.float32) / found[0].eq(0)
                self._weights = total if self._weights is None else self._weights + total
                self._negative = found if self._negative is None else _first_negative(
                    self._negative, found)

    def notes(self) -> torch.Tensor:
        """The notes so far ``[2]`` (scores' and weights' sums; 0 where none): only their
        finiteness matters, so a data-parallel game sums them over the ranks."""
        zero = self._zero
        return torch.stack([zero if self._scores is None else self._scores,
                            zero if self._weights is None else self._weights])

    def share(self, notes: torch.Tensor) -> None:
        """Take the notes summed over every rank (:meth:`notes`): one rank's non-finite score
        or negative weight then skips the step on all of them, which stay in step."""
        self._scores, self._weights = notes[0], notes[1]

    def _save_estimates(self) -> None:
        """Copy the evaluator's running estimates (its public floating-point buffers): a pass
        on non-finite scores makes them NaN (its sums share one product with the scores)."""
        if self._module is None:
            return
        live = self._estimates
        if not live:       # found once (walking the module's buffers costs more than a copy)
            live = self._estimates = _merge_views([
                b for name, b in self._module.named_buffers()
                if not name.startswith("_") and b.is_floating_point() and b.device == self.device])
            if not live:
                self._module = None
                return
        saved = self._estimates_saved
        if len(saved) != len(live) or any(a.shape != b.shape or a.dtype != b.dtype
                                          for a, b in zip(saved, live, strict=True)):
            saved = self._estimates_saved = [torch.empty_like(b) for b in live]
        torch._foreach_copy_(saved, live)

    def forget(self, *, buffers: bool = False) -> None:
        """Drop the notes (a step's records were discarded); ``buffers``: find the running
        estimates' buffers again (a state dict was loaded)."""
        self._scores = self._weights = self._negative = None
        if buffers:
            self._estimates = []

    # ------------------------------------------------------------------ per step
    def _tensors(self, optimizer: torch.optim.Optimizer) -> list[tuple[tuple, torch.Tensor]]:
        """θ's parameters and optimizer state on the game's device, keyed by (parameter,
        state key): a state tensor an optimizer rebinds is still matched to its copy."""
        out: list[tuple[tuple, torch.Tensor]] = []
        device, state = self.device, optimizer.state
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.device != device:
                    continue
                out.append(((id(p), None), p))
                # an empty state (SGD without momentum) is not looked up: hashing a tensor
                # is a Python call per parameter and step
                for k, v in (state.get(p, _NO_STATE) if state else _NO_STATE).items():
                    if isinstance(v, torch.Tensor) and v.device == device:
                        out.append(((id(p), k), v))
        return out

    def save(self, optimizer: torch.optim.Optimizer) -> None:
        """Copy θ's parameters and optimizer state (on the game's device) before θ plays."""
        live = self._tensors(optimizer)
        saved = self._saved
        if len(saved) != len(live) or any(
                saved.get(k) is None or saved[k].shape != t.shape or saved[k].dtype != t.dtype
                for k, t in live):
            self._saved = saved = {k: torch.empty_like(t) for k, t in live}
        if live:
            with torch.no_grad():
                torch._foreach_copy_([saved[k] for k, _ in live], [t for _, t in live])

    def verdict(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor, *,
                gradients: bool, step: int | torch.Tensor) -> torch.Tensor:
        """``ok`` (a device boolean) for this step, with θ restored and the flag set when not.
        ``gradients=False`` leaves the gradients to a GradScaler (AMP). Called under
        ``torch.no_grad()`` (the step's, shared with the other players)."""
        zero = self._zero
        tested = [zero if self._scores is None else self._scores,
                  zero if self._weights is None else self._weights, loss]
        if gradients:
            grads = [p.grad for group in optimizer.param_groups for p in group["params"]
                     if p.grad is not None and p.grad.device == self.device]
            if grads:
                tested += torch._foreach_norm(grads, float("inf"))
        negative, self._negative = self._negative, None
        self._scores = self._weights = None
        values = torch.stack(tested)
        # 0·x is 0 for a finite x, NaN for NaN or ±inf: one test for all the values
        skipped = (values.sum() * 0).ne(0)
        ok = ~skipped
        # the first skipped step since the last check: count is 0 exactly while
        # first_bad < 0 (both change together, here and in check())
        first = torch.gt(skipped, self.count)
        self.first_bad.masked_fill_(first, step)
        if self.values.shape != values.shape:
            self.values = torch.zeros_like(values)
        torch.where(first, values, self.values, out=self.values)
        if negative is not None:
            torch.where(first, negative, self.negative, out=self.negative)
        self.count.add_(skipped)
        self._restore(optimizer, ok, skipped)
        for live, old in zip(self._estimates, self._estimates_saved, strict=True):
            torch.where(ok, live, old, out=live)
        return ok

    def _restore(self, optimizer: torch.optim.Optimizer, ok: torch.Tensor,
                 skipped: torch.Tensor) -> None:
        """θ as saved where ``not ok``; state born at this step goes back to zero."""
        saved = self._saved
        for key, t in self._tensors(optimizer):
            old = saved.get(key)
            if old is not None and old.shape == t.shape and old.dtype == t.dtype:
                torch.where(ok, t, old, out=t)
            else:
                t.masked_fill_(skipped, 0)

    # ------------------------------------------------------------------ at log time
    def check(self) -> None:
        """Raise :class:`NonFiniteStepError` if a step since the last check was skipped
        (one sync); the flag is then reset."""
        first, count, n_negative, first_negative, *values = torch.cat(
            [self.first_bad.reshape(1).double(), self.count.reshape(1).double(),
             self.negative.double(), self.values.double()]).tolist()
        if first < 0:
            return
        first, count = int(first), int(count)
        n_negative, first_negative = int(n_negative), int(first_negative)
        self.first_bad.fill_(-1)
        self.count.zero_()
        self.negative.zero_()
        bad = [not math.isfinite(v) for v in values]
        what = tuple(k for k, b in zip(KINDS, [*bad[:3], any(bad[3:])], strict=True) if b)
        raise NonFiniteStepError(_step_message(first, count, what, n_negative, first_negative),
                                 step=first, kinds=what, count=count)


def _negative_rows(w: torch.Tensor) -> torch.Tensor:
    """``[2]`` int64 on the device (no sync): how many weights are negative, and the first
    negative row (0 when none)."""
    neg = w < 0
    return torch.stack([neg.sum(), neg.to(torch.uint8).argmax()])


def _first_negative(before: torch.Tensor, found: torch.Tensor) -> torch.Tensor:
    """Two batches' :func:`_negative_rows` in one step: counts added, the earlier first row
    (the row is within its own batch)."""
    row = torch.where(before[0] > 0, before[1], found[1])
    return torch.stack([before[0] + found[0], row])


def _step_message(first: int, count: int, what: tuple[str, ...], n_negative: int,
                  first_negative: int) -> str:
    """The skipped step's message: what was non-finite, negative weights named apart (they
    are finite and need another remedy), and the remedies."""
    skipped = (f"and was skipped: no parameter, multiplier or slack moved ({count} step(s) "
               "skipped since the last check)")
    remedy = ("lower the learning rate, clip the gradients (torch.nn.utils.clip_grad_norm_), "
              "look for NaN/inf in the features, or run with ConstrainedOptimizer(..., "
              "strict=True) to stop at the offending batch")
    if "weights" not in what or n_negative <= 0:
        return (f"step {first} (counting from 0) met non-finite {', '.join(what)} {skipped}. "
                f"Remedy: {remedy}")
    rest = [k for k in what if k != "weights"]
    also = f" and non-finite {', '.join(rest)}" if rest else ""
    rows = "row" if n_negative == 1 else "rows"
    return (f"step {first} (counting from 0) met negative weights ({n_negative} {rows}, the "
            f"first row {first_negative} of its batch){also} {skipped}. Remedy: weights must "
            "be >= 0 (a negative weight is not a probability mass): drop those rows or give "
            "them weight 0; run with ConstrainedOptimizer(..., strict=True) to stop at the "
            "offending batch" + (f"; for the non-finite values: {remedy}" if rest else ""))


def _merge_views(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """``tensors``, with the views that together tile one contiguous tensor exactly (the
    evaluator's running estimates) replaced by that tensor: saved and restored in one op."""
    out: list[torch.Tensor] = []
    bases: dict[int, tuple[torch.Tensor, list[torch.Tensor]]] = {}
    for t in tensors:
        base = t._base
        if base is None or not (t.is_contiguous() and base.is_contiguous()):
            out.append(t)
        else:
            bases.setdefault(id(base), (base, []))[1].append(t)
    for base, views in bases.values():
        end = base.storage_offset()
        for offset, n in sorted((v.storage_offset(), v.numel()) for v in views):
            end = end + n if offset == end else -1
        out += [base] if end == base.storage_offset() + base.numel() else views
    return out
