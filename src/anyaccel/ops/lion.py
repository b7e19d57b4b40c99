"""CPU Lion (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms")."""

from __future__ import annotations

from types import ModuleType
from typing import Any, ClassVar

import torch
from torch.optim.optimizer import ParamsT

from anyaccel.ops.cpu.cpu_lion import CPULionBuilder
from anyaccel.ops.cpu_features import cpu_vendor
from anyaccel.ops.host_optimizer import HostOptimizer
from anyaccel.ops.hyperparams import LION_RULES, validate


class CPULion(HostOptimizer):
    """Lion: ``p -= lr * sign(beta1 m + (1 - beta1) g)``, decoupled weight decay.

    torch.optim has no Lion; torch's shared keywords (``foreach``, ``fused``,
    ``capturable=False``, ``differentiable=False``) are checked and accepted for uniformity.
    """

    builder_class = CPULionBuilder
    kernel_function = "lion_step"
    hyperparameter_rules = LION_RULES
    state_tensor_keys = ("exp_avg",)

    def __init__(
        self,
        params: ParamsT,
        lr: float | torch.Tensor = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        fused: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
    ) -> None:
        torch_keywords = {"foreach": foreach, "fused": fused, "capturable": capturable}
        validate(LION_RULES, {**torch_keywords, "differentiable": differentiable})
        defaults = {"lr": lr, "betas": betas, "weight_decay": weight_decay, "maximize": maximize}
        super().__init__(params, defaults, fused=fused)

    def _state_specs(self, group: dict[str, Any]) -> tuple[tuple[str, float], ...]:
        """The momentum."""
        return (("exp_avg", 0.0),)

    def _group_scalars(self, group: dict[str, Any]) -> tuple[float | bool, ...]:
        """Lion's hyperparameters, in ``lion_step``'s order."""
        beta1, beta2 = group["betas"]
        return (
            float(group["lr"]),
            float(beta1),
            float(beta2),
            float(group["weight_decay"]),
            bool(group["maximize"]),
        )


class DeepSpeedCPULion(CPULion):
    """``deepspeed.ops.lion.DeepSpeedCPULion``'s signature and attributes over anyaccel's kernel.

    Beside torch's, DeepSpeed's attributes: ``opt_id`` (instances numbered from 0;
    ``optimizer_id`` is the next number), ``ds_opt_lion`` (the compiled kernel), ``cpu_vendor``.
    """

    #: The ``opt_id`` the next instance gets (DeepSpeed's counter, on this class).
    optimizer_id: ClassVar[int] = 0

    def __init__(
        self,
        model_params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        weight_decay: float = 0.0,
        fp32_optimizer_states: bool = True,
    ) -> None:
        self.fp32_optimizer_states = bool(fp32_optimizer_states)
        self.cpu_vendor = cpu_vendor()
        super().__init__(model_params, lr=lr, betas=betas, weight_decay=weight_decay)
        self.opt_id = DeepSpeedCPULion.optimizer_id
        DeepSpeedCPULion.optimizer_id += 1

    @property
    def ds_opt_lion(self) -> ModuleType:
        """DeepSpeed's name for the compiled kernel module (``self.kernel``)."""
        return self.kernel
