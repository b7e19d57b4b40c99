"""CPU Adagrad: a drop-in ``torch.optim.Adagrad`` running a fused, compiled step."""

from __future__ import annotations

from typing import Any

import torch
from torch.optim.optimizer import ParamsT

from anyaccel.ops.cpu.cpu_adagrad import CPUAdagradBuilder
from anyaccel.ops.host_optimizer import HostOptimizer, copy_address


class CPUAdagrad(HostOptimizer):
    """Adagrad with ``torch.optim.Adagrad``'s arguments and semantics."""

    builder_class = CPUAdagradBuilder

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        *,
        maximize: bool = False,
    ) -> None:
        for label, value in (
            ("learning rate", lr),
            ("lr_decay", lr_decay),
            ("epsilon", eps),
            ("weight_decay", weight_decay),
            ("initial_accumulator_value", initial_accumulator_value),
        ):
            if not value >= 0.0:
                raise ValueError(f"invalid {label} value: {value}")
        defaults = {
            "lr": lr,
            "lr_decay": lr_decay,
            "weight_decay": weight_decay,
            "initial_accumulator_value": initial_accumulator_value,
            "eps": eps,
            "maximize": maximize,
        }
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
        """One fused Adagrad step for ``param``, its sum of squares and its optional copy."""
        if "sum" not in state:
            state["sum"] = torch.full_like(
                param,
                float(group["initial_accumulator_value"]),
                memory_format=torch.contiguous_format,
            )
        state_sum = self._state_tensor(param, state, "sum")
        step = self._next_step(state)
        copy_ptr, copy_kind = copy_address(copy)
        self.kernel.adagrad_step(
            param.data_ptr(),
            grad.data_ptr(),
            state_sum.data_ptr(),
            copy_ptr,
            copy_kind,
            param.numel(),
            step,
            float(group["lr"]),
            float(group["lr_decay"]),
            float(group["eps"]),
            float(group["weight_decay"]),
            bool(group["maximize"]),
            threads,
        )


class DeepSpeedCPUAdagrad(CPUAdagrad):
    """``deepspeed.ops.adagrad.DeepSpeedCPUAdagrad``'s signature over anyaccel's kernel."""

    def __init__(
        self,
        model_params: ParamsT,
        lr: float = 1e-2,
        eps: float = 1e-10,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        fp32_optimizer_states: bool = True,
    ) -> None:
        if amsgrad:
            raise ValueError("Adagrad has no amsgrad variant; pass amsgrad=False")
        if not fp32_optimizer_states:
            raise ValueError(
                "fp32_optimizer_states=False is not supported: anyaccel keeps optimizer "
                "states in fp32; pass fp32_optimizer_states=True"
            )
        super().__init__(model_params, lr=lr, eps=eps, weight_decay=weight_decay)
