"""CPU Adagrad: a drop-in ``torch.optim.Adagrad`` running a fused, compiled step."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any, ClassVar

import torch
from torch.optim.optimizer import ParamsT

from anyaccel.ops.cpu.cpu_adagrad import CPUAdagradBuilder
from anyaccel.ops.host_optimizer import CopyGroups, HostOptimizer
from anyaccel.ops.hyperparams import ADAGRAD_RULES
from anyaccel.ops.optimizer_errors import OptimizerValueRuntimeError
from anyaccel.ops.sparse_adagrad import (
    accumulator,
    advance_step,
    check_sparse_gradient,
    sparse_adagrad_update,
)


class CPUAdagrad(HostOptimizer):
    """Adagrad with ``torch.optim.Adagrad``'s arguments and semantics, sparse gradients included.

    ``foreach``, ``fused`` and ``differentiable=False`` are accepted as torch takes them.
    """

    builder_class = CPUAdagradBuilder
    kernel_function = "adagrad_step"
    hyperparameter_rules = ADAGRAD_RULES
    torch_counterpart: ClassVar[str | None] = "Adagrad"
    #: The state key of the sum of squared gradients (torch's name; DeepSpeed's is exp_avg_sq).
    accumulator_key: ClassVar[str] = "sum"
    state_tensor_keys = ("sum",)
    state_key_aliases = {"exp_avg_sq": "sum"}

    def __init__(
        self,
        params: ParamsT,
        lr: float | torch.Tensor = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        defaults = {
            "lr": lr,
            "lr_decay": lr_decay,
            "eps": eps,
            "weight_decay": weight_decay,
            "initial_accumulator_value": initial_accumulator_value,
            "foreach": foreach,
            "maximize": maximize,
            "differentiable": differentiable,
            "fused": fused,
        }
        super().__init__(params, defaults)
        _check_fits_fp32(self.defaults["initial_accumulator_value"])

    def _prepare_param_group(self, param_group: dict[str, Any], where: str) -> None:
        """Warn that a group's own ``initial_accumulator_value`` is ignored, as torch ignores it."""
        defaults = getattr(self, "defaults", {})
        value = param_group.get("initial_accumulator_value")
        if value is not None and value != defaults.get("initial_accumulator_value", value):
            warnings.warn(
                f"{where}: initial_accumulator_value={value!r} is ignored: as in "
                "torch.optim.Adagrad, every state starts at the constructor's "
                f"initial_accumulator_value={defaults['initial_accumulator_value']!r}",
                UserWarning,
                stacklevel=4,
            )

    def _state_specs(self, group: dict[str, Any]) -> tuple[tuple[str, float], ...]:
        """The sum of squared gradients, starting at the constructor's accumulator value."""
        return ((self.accumulator_key, float(self.defaults["initial_accumulator_value"])),)

    @torch.no_grad()
    def step(  # type: ignore[override]
        self,
        closure: Callable[[], float] | None = None,
        fp16_param_groups: CopyGroups | None = None,
    ) -> float | None:
        """One step; parameters with sparse gradients are updated as torch.optim.Adagrad does."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        scaling = self._amp_scaling()
        copies = self._copies_by_group(fp16_param_groups)
        sparse = self._sparse_params()
        held = [(param, param.grad) for _, _, param in sparse]
        try:
            for param, _ in held:
                param.grad = None  # the dense step skips them
            self._step_dense(copies, scaling)
        finally:
            for param, grad in held:
                param.grad = grad
        if scaling.skip:
            return loss
        if scaling.grad_scale is not None:  # each distinct sparse gradient, once
            for grad in {id(grad): grad for _, grad in held if grad is not None}.values():
                grad.div_(scaling.grad_scale)
        for group_index, param_index, param in sparse:
            group, state = self.param_groups[group_index], self.state[param]
            assert param.grad is not None
            initial = float(self.defaults["initial_accumulator_value"])
            sparse_adagrad_update(
                param,
                param.grad,
                accumulator(param, state, self.accumulator_key, initial),
                advance_step(state),
                lr=float(group["lr"]),
                lr_decay=float(group["lr_decay"]),
                eps=float(group["eps"]),
                maximize=bool(group["maximize"]),
            )
            copy = copies[group_index][param_index] if copies is not None else None
            if copy is not None:
                copy.copy_(param)
        return loss

    def _sparse_params(self) -> list[tuple[int, int, torch.Tensor]]:
        """(group, index, param) of each parameter with a sparse gradient, each checked."""
        found = []
        for group_index, group in enumerate(self.param_groups):
            params = group["params"]
            for param_index in self.kernel.sparse_grad_indices(params):  # one native scan
                param = params[param_index]
                assert param.grad is not None
                where = f"param group {group_index}, index {param_index}"
                check_sparse_gradient(param, param.grad, float(group["weight_decay"]), where)
                found.append((group_index, param_index, param))
        return found

    def _group_scalars(self, group: dict[str, Any]) -> tuple[float | bool, ...]:
        """Adagrad's hyperparameters, in ``adagrad_step``'s order."""
        return (
            float(group["lr"]),
            float(group["lr_decay"]),
            float(group["eps"]),
            float(group["weight_decay"]),
            bool(group["maximize"]),
        )


def _check_fits_fp32(initial_accumulator_value: Any) -> None:
    """The accumulators are fp32: refuse a start value they cannot hold, as torch refuses it."""
    value = float(initial_accumulator_value)
    if math.isfinite(value) and value > torch.finfo(torch.float32).max:
        raise OptimizerValueRuntimeError(  # torch: RuntimeError, from filling the state
            f"value cannot be converted to type float without overflow: "
            f"initial_accumulator_value={value!r} overflows the fp32 accumulators; pass a value "
            "below 3.4e38"
        )


class DeepSpeedCPUAdagrad(CPUAdagrad):
    """``deepspeed.ops.adagrad.DeepSpeedCPUAdagrad``'s signature, state key and attributes.

    Beside torch's, DeepSpeed's attributes: ``opt_id`` (instances numbered from 0;
    ``optimizer_id`` is the next number) and ``ds_opt_adagrad`` (the compiled kernel).
    """

    #: The ``opt_id`` the next instance gets (DeepSpeed's counter, on this class).
    optimizer_id: ClassVar[int] = 0

    accumulator_key: ClassVar[str] = "exp_avg_sq"
    state_tensor_keys = ("exp_avg_sq",)
    state_key_aliases = {"sum": "exp_avg_sq"}

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
        self.fp32_optimizer_states = bool(fp32_optimizer_states)
        super().__init__(model_params, lr=lr, eps=eps, weight_decay=weight_decay)
        self.opt_id = DeepSpeedCPUAdagrad.optimizer_id
        DeepSpeedCPUAdagrad.optimizer_id += 1

    @property
    def ds_opt_adagrad(self) -> ModuleType:
        """DeepSpeed's name for the compiled kernel module (``self.kernel``)."""
        return self.kernel
