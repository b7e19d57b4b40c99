"""CPU Adam and AdamW: drop-in ``torch.optim`` replacements running a fused, compiled step.

``CPUAdam`` and ``CPUAdamW`` take torch's arguments; ``DeepSpeedCPUAdam`` takes DeepSpeed's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.optim.optimizer import ParamsT

from anyaccel.ops.cpu.cpu_adam import CPUAdamBuilder
from anyaccel.ops.host_optimizer import (
    HostOptimizer,
    check_betas,
    check_nonnegative,
    require_fp32_states,
)


class CPUAdam(HostOptimizer):
    """Adam (L2 weight decay) with torch's arguments; ``adamw_mode=True`` decouples the decay."""

    builder_class = CPUAdamBuilder
    kernel_function = "adam_step"

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        adamw_mode: bool = False,
        bias_correction: bool = True,
    ) -> None:
        if not float(lr) >= 0.0:  # through float(), as CPUAdam always has checked lr
            raise ValueError(f"invalid learning rate: {lr}")
        check_nonnegative("epsilon value", eps)
        check_betas(betas)
        check_nonnegative("weight_decay value", weight_decay)
        defaults = {
            "lr": lr,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "amsgrad": amsgrad,
            "maximize": maximize,
            "adamw_mode": adamw_mode,
            "bias_correction": bias_correction,
        }
        super().__init__(params, defaults)

    def _state_addresses(
        self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> tuple[int, ...]:
        """The first and second moments, and the running maximum of the second under amsgrad."""
        exp_avg = self._state_tensor(param, state, "exp_avg")
        exp_avg_sq = self._state_tensor(param, state, "exp_avg_sq")
        max_address = 0
        if group["amsgrad"]:
            max_address = self._state_tensor(param, state, "max_exp_avg_sq").data_ptr()
        return exp_avg.data_ptr(), exp_avg_sq.data_ptr(), max_address

    def _scalars(self, group: dict[str, Any], step: int) -> tuple[float | int | bool, ...]:
        """Adam(W)'s step count and hyperparameters, in ``adam_step``'s order."""
        beta1, beta2 = group["betas"]
        return (
            step,
            float(group["lr"]),
            float(beta1),
            float(beta2),
            float(group["eps"]),
            float(group["weight_decay"]),
            bool(group["adamw_mode"]),
            bool(group["bias_correction"]),
            bool(group["maximize"]),
        )


class CPUAdamW(CPUAdam):
    """AdamW (decoupled weight decay) with ``torch.optim.AdamW``'s arguments and defaults."""

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        super().__init__(
            params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize, adamw_mode=True
        )


class DeepSpeedCPUAdam(CPUAdam):
    """``deepspeed.ops.adam.DeepSpeedCPUAdam``'s signature over anyaccel's kernel."""

    def __init__(
        self,
        model_params: ParamsT,
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        adamw_mode: bool = True,
        fp32_optimizer_states: bool = True,
    ) -> None:
        require_fp32_states(fp32_optimizer_states)
        super().__init__(
            model_params,
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            adamw_mode=adamw_mode,
            bias_correction=bias_correction,
        )
