"""The stochastic solution: a finite mixture of model states with weights.

Paper 000 (after Cotter et al.) outputs a *stochastic* model μ: a distribution over θ, whose
rates are expectations over the draw, ``R_k(μ) = E_{θ~μ} R_k(θ)`` (Section 2). Here μ has
``R`` members (snapshots) stacked as ``{name: [R, *shape]}`` tensors and evaluated from one
module skeleton with :func:`torch.func.functional_call` (vectorised with ``vmap``), so no module
is copied per member. The skeleton lives on the ``meta`` device: it holds no data.

* :meth:`StochasticModel.scores` gives every member's scores ``[R, B]``.
* :meth:`StochasticModel.batch` wraps them in a :class:`fairgames.rates.Batch` with
  ``mixture_weights``, so the evaluator computes each leaf as the exact mixture expectation
  (leaves averaged over members first, then ψ / ratios applied, as the definition requires).
* :meth:`StochasticModel.predict` samples one member per example; :meth:`predict_proba` is the
  exact probability of predicting positive.

Example:
    >>> import torch
    >>> a, b = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    >>> with torch.no_grad():
    ...     _ = a.weight.fill_(1.0), a.bias.zero_(), b.weight.fill_(-1.0), b.bias.zero_()
    >>> mix = StochasticModel.from_modules([a, b], weights=[0.25, 0.75])
    >>> x = torch.tensor([[1.0, 1.0]])
    >>> mix.scores(x)
    tensor([[ 2.],
            [-2.]])
    >>> float(mix.predict_proba(x)[0])
    0.25
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn
from torch.func import functional_call, vmap

from fairgames.rates import Batch
from fairgames.rates.thresholds import rounded

from .snapshots import model_state

ModuleSource = nn.Module | Callable[[], nn.Module]


def skeleton_of(source: ModuleSource) -> nn.Module:
    """A data-free copy of a module (or of a factory's module) on the ``meta`` device, in
    eval mode, for ``functional_call`` (the source module is left untouched)."""
    if isinstance(source, nn.Module):
        memo: dict[int, object] = {}
        for _, t in model_state(source):
            meta = torch.empty_like(t, device="meta")
            memo[id(t)] = nn.Parameter(meta, t.requires_grad) if isinstance(
                t, nn.Parameter) else meta
        module = copy.deepcopy(source, memo)
    elif callable(source):
        with torch.device("meta"):
            module = source()
        if not isinstance(module, nn.Module):
            raise TypeError(f"the module factory returned {type(module).__name__}, not an "
                            "nn.Module")
        module = module.to("meta")
    else:
        raise TypeError("expected an nn.Module (template) or a callable returning one, got "
                        f"{type(source).__name__}")
    return module.eval()


def materialize(source: ModuleSource, state: Mapping[str, torch.Tensor],
                device: torch.device | str | None = None) -> nn.Module:
    """A real module with the architecture of ``source`` holding the tensors ``state``."""
    module = skeleton_of(source)
    dev = torch.device(device) if device is not None else next(iter(state.values())).device
    module = module.to_empty(device=dev)
    names = [n for n, _ in model_state(module)]
    _check_names(names, state)
    with torch.no_grad():
        for name, t in model_state(module):
            t.copy_(state[name])
    return module.train()


def _check_names(expected: Sequence[str], given: Mapping[str, torch.Tensor]) -> None:
    missing = [n for n in expected if n not in given]
    extra = [n for n in given if n not in expected]
    if missing or extra:
        raise ValueError(f"the member state does not match the module: missing {missing}, "
                         f"unexpected {extra}")


def as_scores(out: torch.Tensor) -> torch.Tensor:
    """A model's output as scores ``[B]``: ``[B]`` as it is, ``[B, 1]`` flattened.

    Example:
        >>> as_scores(torch.zeros(3, 1)).shape
        torch.Size([3])
    """
    if out.dim() == 2 and out.shape[-1] == 1:
        out = out[:, 0]
    if out.dim() != 1:
        raise ValueError(f"the model must output scores [B] or [B, 1], got {tuple(out.shape)}")
    return out


class StochasticModel(nn.Module):
    """A mixture of ``R`` states of one architecture with weights ``[R]``.

    Args:
        template: the architecture, as a module (its values are not used) or a factory.
        members: ``{name: [R, *shape]}`` for every parameter and buffer of the template
            (names as in ``named_parameters()`` / ``named_buffers()``).
        weights: ``[R]`` non-negative, summing to 1 (uniform by default).
        steps: optional training step of each member (metadata).
        vectorize: evaluate members with ``vmap`` (default); ``False`` loops over members,
            for modules ``vmap`` cannot trace.
    """

    def __init__(self, template: ModuleSource, members: Mapping[str, torch.Tensor],
                 weights: torch.Tensor | Sequence[float] | None = None, *,
                 steps: Sequence[int] | None = None, vectorize: bool = True) -> None:
        super().__init__()
        skeleton = skeleton_of(template)
        self.names = [n for n, _ in model_state(skeleton)]
        _check_names(self.names, members)
        expected = dict(model_state(skeleton))
        sizes = {int(t.shape[0]) if t.dim() else -1 for t in members.values()}
        if len(sizes) != 1 or -1 in sizes or 0 in sizes:
            raise ValueError("every member tensor must be stacked [R, *shape] with the same "
                             f"R >= 1; got leading sizes {sorted(sizes)}")
        r = sizes.pop()
        for i, name in enumerate(self.names):
            t = members[name]
            if tuple(t.shape[1:]) != tuple(expected[name].shape):
                raise ValueError(f"member tensor {name} has shape {tuple(t.shape)}, expected "
                                 f"[R, {', '.join(map(str, expected[name].shape))}]")
            self.register_buffer(f"member_{i}", t.detach())
        device = members[self.names[0]].device
        if weights is None:
            w = torch.full((r,), 1.0 / r, dtype=torch.float64, device=device)
        else:
            w = torch.as_tensor(weights, dtype=torch.float64).to(device)
            if w.shape != (r,):
                raise ValueError(f"weights must have shape [{r}] (one per member), got "
                                 f"{tuple(w.shape)}")
            # Construction is not a training step: checking values on the host is fine.
            if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
                raise ValueError("weights must be finite and non-negative")
            total = float(w.sum())
            if abs(total - 1.0) > 1e-6:
                raise ValueError(f"weights must sum to 1, got {total}")
            w = w / total
        self.register_buffer("weights", w)
        self.steps = None if steps is None else [int(s) for s in steps]
        if self.steps is not None and len(self.steps) != r:
            raise ValueError(f"steps must give one step per member ({r}), got {len(self.steps)}")
        self.vectorize = vectorize
        # A plain attribute, not a submodule: the skeleton holds no state of this model.
        self.__dict__["skeleton"] = skeleton

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_modules(cls, modules: Sequence[nn.Module],
                     weights: torch.Tensor | Sequence[float] | None = None,
                     **kwargs) -> StochasticModel:
        """Stack the states of modules of one architecture (copies them)."""
        if not modules:
            raise ValueError("a mixture needs at least one module")
        states = [dict(model_state(m)) for m in modules]
        members = {n: torch.stack([s[n].detach() for s in states]) for n in states[0]}
        return cls(modules[0], members, weights, **kwargs)

    def __len__(self) -> int:
        return int(self.weights.shape[0])

    @property
    def members(self) -> dict[str, torch.Tensor]:
        """``{name: [R, *shape]}`` (views of the stored buffers)."""
        return {n: getattr(self, f"member_{i}") for i, n in enumerate(self.names)}

    def member_state(self, r: int) -> dict[str, torch.Tensor]:
        """The state of member ``r`` (views)."""
        return {n: t[r] for n, t in self.members.items()}

    def member(self, r: int) -> nn.Module:
        """Member ``r`` as a standalone module (a deterministic solution)."""
        if not 0 <= r < len(self):
            raise IndexError(f"member {r} out of range for a mixture of {len(self)}")
        return materialize(self.skeleton, self.member_state(r))

    def subset(self, weights: torch.Tensor | Sequence[float]) -> StochasticModel:
        """A new mixture of the members with positive ``weights`` (e.g. from LP shrinking)."""
        w = torch.as_tensor(weights, dtype=torch.float64).cpu()
        if w.shape != (len(self),):
            raise ValueError(f"weights must have shape [{len(self)}], got {tuple(w.shape)}")
        keep = [i for i, v in enumerate(w.tolist()) if v > 0]
        if not keep:
            raise ValueError("no member has positive weight")
        idx = torch.tensor(keep, device=self.weights.device)
        members = {n: t.index_select(0, idx) for n, t in self.members.items()}
        kept_w = w[keep] / w[keep].sum()
        steps = None if self.steps is None else [self.steps[i] for i in keep]
        return StochasticModel(self.skeleton, members, kept_w, steps=steps,
                               vectorize=self.vectorize)

    # ------------------------------------------------------------------ evaluation
    def scores(self, x: torch.Tensor) -> torch.Tensor:
        """Scores ``[R, B]`` of every member on inputs ``x`` (members in eval mode)."""
        members = self.members
        if self.vectorize:
            out = vmap(lambda state: functional_call(self.skeleton, state, (x,)))(members)
        else:
            out = torch.stack([functional_call(self.skeleton, {n: t[r] for n, t in
                                                               members.items()}, (x,))
                               for r in range(len(self))])
        if out.dim() == 3 and out.shape[-1] == 1:
            out = out[..., 0]
        if out.dim() != 2:
            raise ValueError("the model must output scores [B] or [B, 1]; members gave "
                             f"{tuple(out.shape[1:])}")
        return out

    forward = scores

    def member_scores(self, x: torch.Tensor, r: int) -> torch.Tensor:
        """Scores ``[B]`` of member ``r`` alone."""
        if not 0 <= r < len(self):
            raise IndexError(f"member {r} out of range for a mixture of {len(self)}")
        return as_scores(functional_call(self.skeleton, self.member_state(r), (x,)))

    def predict_proba(self, x: torch.Tensor) -> torch.Tensor:
        """``P(ŷ = 1 | x) = Σ_r w_r 1{s_r(x) > 0}`` ``[B]`` (exact, no sampling)."""
        s = self.scores(x)
        return (self.weights.to(s.dtype)[:, None] * (s > 0).to(s.dtype)).sum(0)

    def sample_members(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``n`` member indices drawn i.i.d. from the weights (on the weights' device; a
        ``generator`` must live on that device too)."""
        return torch.multinomial(self.weights, n, replacement=True, generator=generator)

    def sample_scores(self, x: torch.Tensor, generator: torch.Generator | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
        """One member drawn per example: ``(scores [B], member index [B])``."""
        s = self.scores(x)
        r = self.sample_members(s.shape[1], generator).to(s.device)
        return s.gather(0, r[None, :])[0], r

    def predict(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Randomised predictions ``[B]`` in {0, 1}: each example uses one sampled member
        (a regressor's values: :meth:`predict_values`)."""
        s, _ = self.sample_scores(x, generator)
        return (s > 0).to(s.dtype)

    def predict_values(self, x: torch.Tensor, generator: torch.Generator | None = None, *,
                       grid_size: int | None = None) -> torch.Tensor:
        """A randomised regressor's predictions ``[B]``: each example the value of one sampled
        member (never the members' average, whose CDF differs: paper 003 §2.4).

        ``grid_size=N`` rounds each value to its cell's midpoint ``⌊f⌋_α + α/2`` (α = 1/N;
        paper 003 §4.1, the predictor its guarantees are stated for), with ``f < 0`` in the
        first cell and the top value capped at 1: ``P[f ≥ z]`` is unchanged at every ``z`` of
        the grid 1/N, …, 1 (a value and its midpoint lie above the same grid points).

        Example:
            >>> import torch
            >>> f = torch.nn.Linear(1, 1)                      # f(x) = x
            >>> _ = f.weight.data.fill_(1.0), f.bias.data.zero_()
            >>> m = StochasticModel.from_modules([f])
            >>> m.predict_values(torch.tensor([[0.06], [0.5], [-0.2], [1.0]]),
            ...                  grid_size=4).tolist()
            [0.125, 0.625, 0.125, 1.0]
        """
        s, _ = self.sample_scores(x, generator)
        return s if grid_size is None else rounded(s, grid_size).to(s.dtype)

    def batch(self, x: torch.Tensor, labels: torch.Tensor, **kwargs) -> Batch:
        """A rates :class:`Batch` of the mixture (scores ``[R, B]`` + ``mixture_weights``);
        ``kwargs`` go to ``Batch`` (``groups``, ``group_values``, ``weights``, ...)."""
        s = self.scores(x)
        return Batch(scores=s, labels=labels,
                     mixture_weights=self.weights.to(s.device, s.dtype), **kwargs)

    def extra_repr(self) -> str:
        return f"members={len(self)}, skeleton={type(self.skeleton).__name__}"
