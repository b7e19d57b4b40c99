"""Reference optimizers for the CPU optimizer tests, written in plain torch ops.

``reference_for(name)`` builds torch's own optimizer (Lion: ``ReferenceLion``) over fp32 tensors;
``LowPrecisionReference`` drives it the way a bf16/fp16 parameter is stepped: widen, step in fp32,
round back (and round the states too when they are kept in low precision).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from anyaccel.ops.adagrad import CPUAdagrad, DeepSpeedCPUAdagrad
from anyaccel.ops.adam import CPUAdam, CPUAdamW, DeepSpeedCPUAdam
from anyaccel.ops.lion import CPULion, DeepSpeedCPULion


class ReferenceLion(torch.optim.Optimizer):
    """Lion as the paper states it: ``p -= lr * sign(beta1 m + (1 - beta1) g)``, then m."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                momentum = self.state[param].setdefault("exp_avg", torch.zeros_like(param))
                param.mul_(1 - group["lr"] * group["weight_decay"])
                blend = momentum * beta1 + param.grad * (1 - beta1)
                # NaN stays NaN (numpy's sign): torch.sign(NaN) is 0 on some builds, which would
                # turn a NaN gradient into "no update" forever, since the momentum stays NaN.
                update = torch.where(blend.isnan(), blend, blend.sign())
                param.add_(update, alpha=-group["lr"])
                momentum.mul_(beta2).add_(param.grad, alpha=1 - beta2)


Factory = Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]

#: Each of our optimizers (and DeepSpeed alias) with the reference it must match, same options.
PAIRS: dict[str, tuple[Factory, Factory]] = {
    "CPUAdam": (
        lambda ps: CPUAdam(ps, lr=1e-2, weight_decay=0.1),
        lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.1),
    ),
    "CPUAdamW": (
        lambda ps: CPUAdamW(ps, lr=1e-2, weight_decay=0.1),
        lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    ),
    "CPUAdagrad": (
        lambda ps: CPUAdagrad(ps, lr=1e-2, lr_decay=0.01),
        lambda ps: torch.optim.Adagrad(ps, lr=1e-2, lr_decay=0.01),
    ),
    "CPULion": (
        lambda ps: CPULion(ps, lr=1e-3, weight_decay=0.1),
        lambda ps: ReferenceLion(ps, lr=1e-3, weight_decay=0.1),
    ),
    "DeepSpeedCPUAdam": (
        lambda ps: DeepSpeedCPUAdam(ps),  # DeepSpeed's defaults, as DEEPSPEED_CLASSES builds them
        lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.0),
    ),
    "DeepSpeedCPUAdagrad": (
        lambda ps: DeepSpeedCPUAdagrad(ps),
        lambda ps: torch.optim.Adagrad(ps, lr=1e-2),
    ),
    "DeepSpeedCPULion": (
        lambda ps: DeepSpeedCPULion(ps),
        lambda ps: ReferenceLion(ps, lr=1e-3, betas=(0.9, 0.999)),
    ),
}

#: The DeepSpeed-signature classes, which take ``fp32_optimizer_states``.
DEEPSPEED_CLASSES: dict[str, type[torch.optim.Optimizer]] = {
    "DeepSpeedCPUAdam": DeepSpeedCPUAdam,
    "DeepSpeedCPUAdagrad": DeepSpeedCPUAdagrad,
    "DeepSpeedCPULion": DeepSpeedCPULion,
}


class LowPrecisionReference:
    """Steps low-precision parameters as the kernels do: fp32 math, rounded back each step."""

    def __init__(self, params: list[torch.Tensor], factory: Factory, state_dtype: torch.dtype):
        self.params = params
        self.masters = [torch.nn.Parameter(p.detach().float()) for p in params]
        self.optimizer = factory(self.masters)
        self.state_dtype = state_dtype

    @torch.no_grad()
    def step(self) -> None:
        """Widen params and grads, step torch's optimizer, round params (and states) back."""
        for param, master in zip(self.params, self.masters, strict=True):
            master.copy_(param.float())
            master.grad = None if param.grad is None else param.grad.float()
        self.optimizer.step()
        for param, master in zip(self.params, self.masters, strict=True):
            param.copy_(master)
            for value in self.optimizer.state[master].values():
                if value.is_floating_point() and value.dim() > 0:
                    value.copy_(value.to(self.state_dtype))
