"""CPU Lion (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms")."""

from __future__ import annotations

from typing import Any

import torch
from torch.optim.optimizer import ParamsT

from anyaccel.ops.cpu.cpu_lion import CPULionBuilder
from anyaccel.ops.host_optimizer import HostOptimizer, copy_address


class CPULion(HostOptimizer):
    """Lion: ``p -= lr * sign(beta1 m + (1 - beta1) g)``, decoupled weight decay."""

    builder_class = CPULionBuilder

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
        *,
        maximize: bool = False,
    ) -> None:
        if not lr >= 0.0:
            raise ValueError(f"invalid learning rate: {lr}")
        for index, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"invalid beta parameter at index {index}: {beta}")
        if not weight_decay >= 0.0:
            raise ValueError(f"invalid weight_decay value: {weight_decay}")
        defaults = {"lr": lr, "betas": betas, "weight_decay": weight_decay, "maximize": maximize}
        super().__init__(params, defaults)

    def _update(
        self,
        param: torch.Tensor,
        grad: torch.Tensor,
        state: dict[str, Any],
        group: dict[str, Any],
        copy: torch.Tensor | None,
        threads: int,
    ) -> None:
        """One fused Lion step for ``param``, its momentum and its optional copy."""
        exp_avg = self._state_tensor(param, state, "exp_avg")
        self._next_step(state)
        copy_ptr, copy_kind = copy_address(copy)
        beta1, beta2 = group["betas"]
        self.kernel.lion_step(
            param.data_ptr(),
            grad.data_ptr(),
            exp_avg.data_ptr(),
            copy_ptr,
            copy_kind,
            param.numel(),
            float(group["lr"]),
            float(beta1),
            float(beta2),
            float(group["weight_decay"]),
            bool(group["maximize"]),
            threads,
        )


class DeepSpeedCPULion(CPULion):
    """``deepspeed.ops.lion.DeepSpeedCPULion``'s signature over anyaccel's kernel."""

    def __init__(
        self,
        model_params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        weight_decay: float = 0.0,
        fp32_optimizer_states: bool = True,
    ) -> None:
        if not fp32_optimizer_states:
            raise ValueError(
                "fp32_optimizer_states=False is not supported: anyaccel keeps optimizer "
                "states in fp32; pass fp32_optimizer_states=True"
            )
        super().__init__(model_params, lr=lr, betas=betas, weight_decay=weight_decay)
