"""A trained solution ready to apply to new rows: :class:`Predictor`.

A run's solutions are plain modules (the final model, the best iterate) or mixtures of
models (the stochastic one, often the recommended one): a *randomised* classifier that
predicts with one member drawn per example (paper 000, Section 2). A :class:`Predictor` wraps
either with the run's decision threshold, label kind and table preprocessing:

* :meth:`Predictor.predict_proba` — binary target: ``P(ŷ = 1 | x) = Σ_r w_r 1{s_r(x) >
  d}`` (exact, no sampling; 0 or 1 for a deterministic model); real target: the expected
  prediction ``Σ_r w_r f_r(x)``. These are the probabilities *of the randomised
  prediction*, not calibrated class probabilities.
* :meth:`Predictor.predict` — binary: ``ŷ`` in {0, 1}, one member drawn per example from the
  weights (seeded by ``seed`` or ``generator``); real: the drawn member's value.
* :meth:`Predictor.scores` — every member's scores ``[R, N]`` (``[N]`` for one model).
* :meth:`Predictor.to_torchscript` — a deterministic solution as a TorchScript file.

Inputs are encoded features ``[N, D]`` (a tensor or array), or a ``pandas.DataFrame`` of raw
rows when the run was trained on a table (``data=table`` / ``from_frame``: the fitted
preprocessing is applied; the target column is not needed, the protected one only when it
was a feature).

Example:
    >>> import torch
    >>> a, b = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
    >>> with torch.no_grad():
    ...     _ = a.weight.fill_(1.0), a.bias.zero_(), b.weight.fill_(-1.0), b.bias.zero_()
    >>> from fairgames.game.solutions import StochasticModel
    >>> p = Predictor(StochasticModel.from_modules([a, b], weights=[0.25, 0.75]))
    >>> p.predict_proba(torch.tensor([[2.0], [-2.0]])).tolist()
    [0.25, 0.75]
    >>> p.predict(torch.tensor([[2.0], [-2.0]]), seed=0).shape
    torch.Size([2])
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from fairgames.data import DataError, TablePreprocessor
from fairgames.game.solutions import StochasticModel

from ..data import predict_scores

Features = torch.Tensor | np.ndarray | Any   # Any: a pandas DataFrame of raw rows
CHUNK = 65536      # rows per forward pass (trainer.eval_chunk's default)


class Predictor(nn.Module):
    """One solution of a run with what applying it needs.

    Args:
        solution: a module (deterministic) or a :class:`StochasticModel` (a mixture).
        label_kind: ``"binary"`` or ``"real"`` (the run's target).
        decision: the score a binary prediction must exceed (0, or 0.5 for a sigmoid head).
        preprocessor: the run's table preprocessing (``preprocess.json``), or ``None``.
        name: the solution's name (``recommended``, ``final``, ...), for messages.
        chunk: rows per forward pass.
        input_dim: the number of features ``D`` (for tracing a model TorchScript cannot
            script), or ``None``.
    """

    def __init__(self, solution: nn.Module, *, label_kind: str = "binary", decision: float = 0.0,
                 preprocessor: TablePreprocessor | None = None, name: str = "solution",
                 chunk: int = CHUNK, input_dim: int | None = None) -> None:
        super().__init__()
        if label_kind not in ("binary", "real"):
            raise ValueError(f"label_kind must be 'binary' or 'real', got {label_kind!r}")
        self.solution = solution.eval()
        self.label_kind, self.decision, self.name = label_kind, float(decision), name
        self.preprocessor, self.chunk = preprocessor, int(chunk)
        self.input_dim = input_dim

    @property
    def is_mixture(self) -> bool:
        """Whether the solution is a mixture (randomised) rather than one model."""
        return isinstance(self.solution, StochasticModel)

    @property
    def weights(self) -> torch.Tensor:
        """The members' weights ``[R]`` (``[1.0]`` for one model)."""
        if isinstance(self.solution, StochasticModel):
            return self.solution.weights
        return torch.ones(1, dtype=torch.float64, device=self._device())

    def _device(self) -> torch.device:
        for t in (*self.solution.parameters(), *self.solution.buffers()):
            return t.device
        return torch.device("cpu")

    # ------------------------------------------------------------------ inputs
    def features(self, x: Features) -> torch.Tensor:
        """``x`` as float32 features ``[N, D]`` on the solution's device (a DataFrame through
        the run's preprocessing)."""
        if hasattr(x, "columns") and hasattr(x, "iloc"):      # a pandas DataFrame
            if self.preprocessor is None:
                raise DataError(
                    "this run has no table preprocessing (preprocess.json): it was trained on "
                    "a packaged data set or on your own tensors, so new rows must be given as "
                    "encoded features [N, D] (a tensor or array), e.g. fairgames.train.data."
                    "load_splits(run.config['data'], run.config['seed']).test.features")
            x = self.preprocessor.transform(x)
        t = torch.as_tensor(np.asarray(x) if not torch.is_tensor(x) else x)
        if t.dim() != 2:
            raise DataError(f"features must be a 2-D table [N, D], got shape {tuple(t.shape)}")
        return t.to(self._device(), torch.float32)

    # ------------------------------------------------------------------ outputs
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`predict_proba` of encoded features (the module's output)."""
        return self.predict_proba(x)

    def scores(self, x: Features) -> torch.Tensor:
        """Scores ``[N]`` of one model, ``[R, N]`` of a mixture's members."""
        return predict_scores(self.solution, self.features(x), self.chunk)

    def _member_scores(self, x: Features) -> torch.Tensor:
        s = self.scores(x)
        return s if s.dim() == 2 else s[None]

    def predict_proba(self, x: Features) -> torch.Tensor:
        """``[N]``: ``P(ŷ = 1 | x)`` of the randomised prediction (binary target), or the
        expected prediction (real target); exact, no sampling."""
        s = self._member_scores(x).double()
        values = s if self.label_kind == "real" else (s > self.decision).double()
        return (self.weights.to(s.device)[:, None] * values).sum(0)

    def predict(self, x: Features, *, seed: int | None = None,
                generator: torch.Generator | None = None) -> torch.Tensor:
        """``[N]`` predictions, one member drawn per example (``seed`` or ``generator`` on the
        solution's device makes the draw repeatable): ``ŷ`` in {0, 1} for a binary target,
        the drawn member's value for a real one."""
        s = self._member_scores(x)
        if generator is None and seed is not None:
            generator = torch.Generator(self.weights.device).manual_seed(int(seed))
        if len(s) == 1:
            picked = s[0]
        else:
            r = torch.multinomial(self.weights, s.shape[1], replacement=True,
                                  generator=generator).to(s.device)
            picked = s.gather(0, r[None, :])[0]
        return picked if self.label_kind == "real" else (picked > self.decision).to(s.dtype)

    # ------------------------------------------------------------------ export
    def to_torchscript(self, path: str | os.PathLike[str] | None = None,
                       input_dim: int | None = None) -> torch.jit.ScriptModule:
        """The deterministic solution as TorchScript (features ``[N, D]`` to scores ``[N]``;
        predict positive iff score > ``decision``), saved at ``path`` when given with its
        ``decision`` and ``label_kind`` as the extra file ``fairgames.json``. Scripted, or
        traced on ``input_dim`` features (default: the predictor's) where scripting fails
        (e.g. paper 003's grid-rounded regressors).

        Raises:
            ValueError: the solution is a mixture (a randomised classifier: export the
                ``best_iterate`` or ``final`` solution instead).
        """
        if self.is_mixture:
            raise ValueError(
                f"the {self.name} solution is a mixture of {len(self.weights)} models (a "
                "randomised classifier) and cannot be exported to TorchScript: export a "
                "deterministic solution (run.best_iterate or run.final), or deploy the mixture "
                "through load_run(...).predict")
        module = _ScoreHead(self.solution).eval()
        with warnings.catch_warnings():
            # torch >= 2.10 marks TorchScript deprecated; it is still the format that C++ and
            # mobile runtimes load, and the one asked for here
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                scripted = torch.jit.script(module)
            except Exception as e:          # noqa: BLE001 (torch raises many kinds)
                input_dim = input_dim if input_dim is not None else self.input_dim
                if input_dim is None:
                    raise ValueError(f"the {self.name} model cannot be scripted ({e}); give "
                                     "input_dim to trace it instead") from e
                example = torch.zeros(2, input_dim, device=self._device())
                scripted = torch.jit.trace(module, example)
            if path is not None:
                extra = {"fairgames.json": json.dumps(self.export_record())}
                torch.jit.save(scripted, os.fspath(path), _extra_files=extra)
        return scripted

    def export_record(self) -> dict[str, Any]:
        """What a deployed score needs beside the module: the decision and label kind."""
        return {"solution": self.name, "decision": self.decision, "label_kind": self.label_kind,
                "output": "score [N]; predicted positive iff score > decision"}

    def extra_repr(self) -> str:
        kind = f"mixture of {len(self.weights)}" if self.is_mixture else "deterministic"
        return f"name={self.name!r}, {kind}, label_kind={self.label_kind!r}"


class _ScoreHead(nn.Module):
    """A model's output as float32 scores ``[N]`` (``[N, 1]`` flattened), for export: the
    same values as :meth:`Predictor.scores`."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.model(x)
        if out.dim() == 2 and out.shape[1] == 1:
            out = out[:, 0]
        return out.float()


def read_export_record(path: str | os.PathLike[str]) -> Mapping[str, Any]:
    """The ``fairgames.json`` record of a TorchScript file :meth:`Predictor.to_torchscript`
    saved."""
    extra = {"fairgames.json": ""}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.load(os.fspath(path), _extra_files=extra)
    return json.loads(extra["fairgames.json"])
