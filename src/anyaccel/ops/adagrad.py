"""CPU Adagrad: a drop-in ``torch.optim.Adagrad`` running a fused, compiled step."""

from __future__ import annotations

from typing import Any

import torch
from torch.optim.optimizer import ParamsT

from anyaccel.ops.cpu.cpu_adagrad import CPUAdagradBuilder
from anyaccel.ops.host_optimizer import HostOptimizer, check_nonnegative, require_fp32_states


class CPUAdagrad(HostOptimizer):
    """Adagrad with ``torch.optim.Adagrad``'s arguments and semantics."""

    builder_class = CPUAdagradBuilder
    kernel_function = "adagrad_step"

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
            check_nonnegative(f"{label} value", value)
        defaults = {
            "lr": lr,
            "lr_decay": lr_decay,
            "weight_decay": weight_decay,
            "initial_accumulator_value": initial_accumulator_value,
            "eps": eps,
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def _state_addresses(
        self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> tuple[int, ...]:
        """The sum of squared gradients, starting at ``initial_accumulator_value``."""
        initial = float(group["initial_accumulator_value"])
        return (self._state_tensor(param, state, "sum", initial).data_ptr(),)

    def _scalars(self, group: dict[str, Any], step: int) -> tuple[float | int | bool, ...]:
        """Adagrad's step count and hyperparameters, in ``adagrad_step``'s order."""
        return (
            step,
            float(group["lr"]),
            float(group["lr_decay"]),
            float(group["eps"]),
            float(group["weight_decay"]),
            bool(group["maximize"]),
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
        require_fp32_states(fp32_optimizer_states)
        super().__init__(model_params, lr=lr, eps=eps, weight_decay=weight_decay)
