"""CPU Adam and AdamW: drop-in ``torch.optim`` replacements running a fused, compiled step.

``CPUAdam`` and ``CPUAdamW`` take torch's arguments; ``DeepSpeedCPUAdam`` takes DeepSpeed's.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any, ClassVar

import torch
from torch.optim.optimizer import ParamsT, StateDict

from anyaccel.ops.cpu.cpu_adam import CPUAdamBuilder
from anyaccel.ops.cpu_features import cpu_vendor
from anyaccel.ops.host_optimizer import HostOptimizer
from anyaccel.ops.hyperparams import (
    ADAM_RULES,
    check_torch_betas,
    check_torch_tensor_foreach,
    validate,
)

#: Adam's state tensors and their initial values.
ADAM_STATES = (("exp_avg", 0.0), ("exp_avg_sq", 0.0))


class CPUAdam(HostOptimizer):
    """Adam (L2 weight decay) with torch's arguments; ``adamw_mode=True`` decouples the decay.

    ``foreach``, ``fused``, ``capturable=False`` and ``differentiable=False`` are accepted as
    ``torch.optim.Adam`` takes them (the step is always one fused native pass);
    ``decoupled_weight_decay`` is torch's name for ``adamw_mode``.
    """

    builder_class = CPUAdamBuilder
    kernel_function = "adam_step"
    hyperparameter_rules = ADAM_RULES
    torch_counterpart: ClassVar[str | None] = "Adam"
    state_tensor_keys = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
    #: Whether every group's weight decay is decoupled whatever a checkpoint says (torch's AdamW).
    always_decoupled: ClassVar[bool] = False
    #: Whether betas must be both floats or both tensors, as the installed torch.optim.Adam
    #: requires (DeepSpeed's signature takes any numbers).
    torch_betas_rule: ClassVar[bool] = True

    def __init__(
        self,
        params: ParamsT,
        lr: float | torch.Tensor = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        adamw_mode: bool = False,
        bias_correction: bool = True,
        foreach: bool | None = None,
        fused: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        decoupled_weight_decay: bool = False,
    ) -> None:
        defaults = {
            "lr": lr,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "amsgrad": amsgrad,
            "maximize": maximize,
            "foreach": foreach,
            "fused": fused,
            "capturable": capturable,
            "differentiable": differentiable,
            # One setting under two names; torch's default False means "not given".
            "adamw_mode": adamw_mode if decoupled_weight_decay is False else decoupled_weight_decay,
            "bias_correction": bias_correction,
        }
        defaults["decoupled_weight_decay"] = defaults["adamw_mode"]
        if self.torch_betas_rule:
            check_torch_tensor_foreach(self.torch_counterpart or "Adam", defaults)
            validate(self.hyperparameter_rules, defaults)  # torch checks values first
            check_torch_betas(betas)
        super().__init__(params, defaults)

    def _prepare_param_group(self, param_group: dict[str, Any], where: str) -> None:
        """``adamw_mode`` and torch's ``decoupled_weight_decay`` are one setting, kept equal."""
        given = {
            k: param_group[k] for k in ("adamw_mode", "decoupled_weight_decay") if k in param_group
        }
        if len(set(map(bool, given.values()))) > 1:
            raise ValueError(
                f"{where}: adamw_mode={given['adamw_mode']!r} and decoupled_weight_decay="
                f"{given['decoupled_weight_decay']!r} disagree; they are one setting, pass one"
            )
        if given:
            decoupled = bool(next(iter(given.values())))
            param_group["adamw_mode"] = param_group["decoupled_weight_decay"] = decoupled

    def _translate_checkpoint_group(
        self, group: dict[str, Any], current: Mapping[str, Any]
    ) -> None:
        """Decoupled decay from torch's ``decoupled_weight_decay``, else our ``adamw_mode``.

        A checkpoint with neither (torch < 2.6, DeepSpeed) keeps this optimizer's setting;
        ``CPUAdamW`` is always decoupled, as ``torch.optim.AdamW`` is.
        """
        if self.always_decoupled:
            decoupled: Any = True
        elif "decoupled_weight_decay" in group:
            decoupled = group["decoupled_weight_decay"]
        else:
            decoupled = group.get("adamw_mode", current["adamw_mode"])
        group["adamw_mode"] = group["decoupled_weight_decay"] = decoupled

    def state_dict(self) -> StateDict:
        """torch's ``state_dict``, with ``decoupled_weight_decay`` matching each group's mode."""
        saved = super().state_dict()
        for group in saved["param_groups"]:
            group["decoupled_weight_decay"] = bool(group["adamw_mode"])
        return saved

    def _state_specs(self, group: dict[str, Any]) -> tuple[tuple[str, float], ...]:
        """The first and second moments, and the running maximum of the second under amsgrad."""
        if group["amsgrad"]:
            return (*ADAM_STATES, ("max_exp_avg_sq", 0.0))
        return ADAM_STATES

    def _group_scalars(self, group: dict[str, Any]) -> tuple[float | bool, ...]:
        """Adam(W)'s hyperparameters, in ``adam_step``'s order."""
        beta1, beta2 = group["betas"]
        return (
            float(group["lr"]),
            float(beta1),
            float(beta2),
            float(group["eps"]),
            float(group["weight_decay"]),
            bool(group["adamw_mode"]),
            bool(group["bias_correction"]),
            bool(group["maximize"]),
            bool(group["amsgrad"]),
        )

    def _inverse_subgroup_step(self, subgroup_id: int, state: dict[str, Any]) -> None:
        """Undo an older subgroup step algebraically from the gradient, as DeepSpeed does.

        Exact only up to rounding, and impossible where the step met a NaN/Inf or under amsgrad.
        """
        stepped = [(p, g) for g in self.param_groups for p in g["params"] if p.grad is not None]
        if len(stepped) != 1 or stepped[0][1]["amsgrad"]:
            super()._inverse_subgroup_step(subgroup_id, state)
        param, group = stepped[0]
        beta1, beta2 = group["betas"]
        lr, eps, decay = float(group["lr"]), float(group["eps"]), float(group["weight_decay"])
        step = float(state["step"])
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        bias1 = 1 - beta1**step if group["bias_correction"] else 1.0
        bias2 = 1 - beta2**step if group["bias_correction"] else 1.0
        value = param.detach().float()
        update = (lr / bias1) * exp_avg.float() / (exp_avg_sq.float().sqrt() / bias2**0.5 + eps)
        value += update
        grad = param.grad.float() * (-1.0 if group["maximize"] else 1.0)
        if decay and group["adamw_mode"]:
            value /= 1 - lr * decay
        elif decay:
            grad += decay * value
        exp_avg.copy_((exp_avg.float() - (1 - beta1) * grad) / beta1)
        exp_avg_sq.copy_(((exp_avg_sq.float() - (1 - beta2) * grad * grad) / beta2).clamp_(min=0))
        param.copy_(value)


class CPUAdamW(CPUAdam):
    """AdamW (decoupled weight decay) with ``torch.optim.AdamW``'s arguments and defaults."""

    torch_counterpart: ClassVar[str | None] = "AdamW"
    always_decoupled: ClassVar[bool] = True

    def __init__(
        self,
        params: ParamsT,
        lr: float | torch.Tensor = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        super().__init__(
            params,
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            maximize=maximize,
            adamw_mode=True,
            foreach=foreach,
            fused=fused,
            capturable=capturable,
            differentiable=differentiable,
        )


class DeepSpeedCPUAdam(CPUAdam):
    """``deepspeed.ops.adam.DeepSpeedCPUAdam``'s signature and attributes over anyaccel's kernel.

    Beside torch's, DeepSpeed's attributes: ``adam_w_mode`` (the ``adamw_mode`` it was built
    with), ``opt_id`` (instances numbered from 0; ``optimizer_id`` is the next number),
    ``ds_opt_adam`` (the compiled kernel) and ``cpu_vendor``.
    """

    torch_betas_rule: ClassVar[bool] = False
    #: The ``opt_id`` the next instance gets (DeepSpeed's counter, on this class).
    optimizer_id: ClassVar[int] = 0

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
        self.fp32_optimizer_states = bool(fp32_optimizer_states)
        self.adam_w_mode = bool(adamw_mode)
        self.cpu_vendor = cpu_vendor()
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
        self.opt_id = DeepSpeedCPUAdam.optimizer_id  # counted once built, as DeepSpeed counts
        DeepSpeedCPUAdam.optimizer_id += 1

    @property
    def ds_opt_adam(self) -> ModuleType:
        """DeepSpeed's name for the compiled kernel module (``self.kernel``)."""
        return self.kernel
