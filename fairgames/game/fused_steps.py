"""torch's fused optimizer kernels written as plain tensor ops, for a recorded step that
inductor compiles.

A recorded step (:mod:`fairgames.game.capture`) holds θ's parameters and optimizer state as
constants it updates in place. Inductor compiles in-place updates of plain ops on them (SGD's),
but not the fused kernels ``_fused_adam_`` / ``_fused_adamw_`` / ``_fused_adagrad_`` (torch
2.13: "mutating a non-functional tensor with a functional tensor is not allowed"), so the
recording replaces them by these decompositions: the same update — torch's own capturable
formulas, the step count read as a tensor — up to rounding. The step counters are advanced
by the optimizer before the kernel, as torch does.

Example:
    >>> import torch
    >>> p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    >>> q = torch.nn.Parameter(p.detach().clone())
    >>> fused = torch.optim.Adam([p], lr=0.1, fused=True)
    >>> plain = torch.optim.Adam([q], lr=0.1)
    >>> for _ in range(3):
    ...     p.grad, q.grad = torch.tensor([0.5, 1.0]), torch.tensor([0.5, 1.0])
    ...     fused.step(); plain.step()
    >>> s = fused.state[p]
    >>> mirror = p.detach().clone(), s["exp_avg"].clone(), s["exp_avg_sq"].clone()
    >>> p.grad = torch.tensor([0.5, 1.0])
    >>> fused.step()
    >>> DECOMPOSITIONS[torch.ops.aten._fused_adam_.default](
    ...     [mirror[0]], [torch.tensor([0.5, 1.0])], [mirror[1]], [mirror[2]], [], [s["step"]],
    ...     lr=0.1, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False,
    ...     maximize=False)
    >>> torch.allclose(mirror[0], p.detach(), atol=1e-7)
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten


def _unscaled(grad_scale: Any, found_inf: Any) -> None:
    if grad_scale is not None or found_inf is not None:
        raise ValueError("capture() of a fused optimizer with a gradient scaler (AMP): "
                         "train it eagerly, or without the scaler")


def _adam(decoupled: bool) -> Callable[..., None]:
    def step(params: list[torch.Tensor], grads: list[torch.Tensor],
             exp_avgs: list[torch.Tensor], exp_avg_sqs: list[torch.Tensor],
             max_exp_avg_sqs: list[torch.Tensor], state_steps: list[torch.Tensor], *,
             lr: float, beta1: float, beta2: float, weight_decay: float, eps: float,
             amsgrad: bool, maximize: bool, grad_scale: Any = None,
             found_inf: Any = None) -> None:
        _unscaled(grad_scale, found_inf)
        for i, (param, grad, m, v, t) in enumerate(zip(params, grads, exp_avgs, exp_avg_sqs,
                                                       state_steps, strict=True)):
            grad = -grad if maximize else grad
            if weight_decay and decoupled:
                param.mul_(1 - lr * weight_decay)
            elif weight_decay:
                grad = grad + weight_decay * param
            m.lerp_(grad, 1 - beta1)
            v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            # the bias corrections from the step tensor, in float64 as the fused kernel
            # computes them (1 - 0.999^t in float32 is off by ~1e-5 relative at small t)
            t64 = t.double()
            step_size = (lr / (1 - torch.pow(beta1, t64))).to(param.dtype)
            correction = (1 - torch.pow(beta2, t64)).sqrt().to(param.dtype)
            second = v
            if amsgrad:
                torch.maximum(max_exp_avg_sqs[i], v, out=max_exp_avg_sqs[i])
                second = max_exp_avg_sqs[i]
            denom = second.sqrt() / correction + eps
            param.sub_(step_size * m / denom)
    return step


def _adagrad(params: list[torch.Tensor], grads: list[torch.Tensor],
             state_sums: list[torch.Tensor], state_steps: list[torch.Tensor], *, lr: float,
             lr_decay: float, weight_decay: float, eps: float, maximize: bool,
             grad_scale: Any = None, found_inf: Any = None) -> None:
    _unscaled(grad_scale, found_inf)
    for param, grad, total, t in zip(params, grads, state_sums, state_steps, strict=True):
        grad = -grad if maximize else grad
        if weight_decay:
            grad = grad + weight_decay * param
        total.addcmul_(grad, grad, value=1)
        clr = (lr / (1 + (t.double() - 1) * lr_decay)).to(param.dtype)
        param.sub_(clr * grad / (total.sqrt() + eps))


DECOMPOSITIONS: dict[Any, Callable[..., None]] = {
    aten._fused_adam_.default: _adam(decoupled=False),
    aten._fused_adamw_.default: _adam(decoupled=True),
    aten._fused_adagrad_.default: _adagrad,
}
"""What a recording for inductor uses in place of each fused kernel (``make_fx``'s
``decomposition_table``)."""
