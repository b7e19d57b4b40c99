"""CPU Adam and AdamW: drop-in ``torch.optim`` replacements running a fused, compiled step.

``CPUAdam`` and ``CPUAdamW`` take torch's arguments; ``DeepSpeedCPUAdam`` takes DeepSpeed's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.optim.optimizer import ParamsT

from anyaccel.ops.cpu.cpu_adam import CPUAdamBuilder
from anyaccel.ops.host_optimizer import HostOptimizer, copy_address


def _check_hyperparameters(lr: float, betas: tuple[float, float], eps: float, wd: float) -> None:
    """Reject hyperparameters torch's Adam would reject, naming the bad value."""
    if not float(lr) >= 0.0:
        raise ValueError(f"invalid learning rate: {lr}")
    if not eps >= 0.0:
        raise ValueError(f"invalid epsilon value: {eps}")
    for index, beta in enumerate(betas):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"invalid beta parameter at index {index}: {beta}")
    if not wd >= 0.0:
        raise ValueError(f"invalid weight_decay value: {wd}")


class CPUAdam(HostOptimizer):
    """Adam (L2 weight decay) with torch's arguments; ``adamw_mode=True`` decouples the decay."""

    builder_class = CPUAdamBuilder

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
        _check_hyperparameters(lr, betas, eps, weight_decay)
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

    def _update(
        self,
        param: torch.Tensor,
        grad: torch.Tensor,
        state: dict[str, Any],
        group: dict[str, Any],
        copy: torch.Tensor | None,
        threads: int,
    ) -> None:
        """One fused Adam(W) step for ``param``, its moments and its optional copy."""
        exp_avg = self._state_tensor(param, state, "exp_avg")
        exp_avg_sq = self._state_tensor(param, state, "exp_avg_sq")
        max_address = 0
        if group["amsgrad"]:
            max_address = self._state_tensor(param, state, "max_exp_avg_sq").data_ptr()
        step = self._next_step(state)
        copy_ptr, copy_kind = copy_address(copy)
        beta1, beta2 = group["betas"]
        self.kernel.adam_step(
            param.data_ptr(),
            grad.data_ptr(),
            exp_avg.data_ptr(),
            exp_avg_sq.data_ptr(),
            max_address,
            copy_ptr,
            copy_kind,
            param.numel(),
            step,
            float(group["lr"]),
            float(beta1),
            float(beta2),
            float(group["eps"]),
            float(group["weight_decay"]),
            bool(group["adamw_mode"]),
            bool(group["bias_correction"]),
            bool(group["maximize"]),
            threads,
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
        if not fp32_optimizer_states:
            raise ValueError(
                "fp32_optimizer_states=False is not supported: anyaccel keeps optimizer "
                "states in fp32; pass fp32_optimizer_states=True"
            )
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
