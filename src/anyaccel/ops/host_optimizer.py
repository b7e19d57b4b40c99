"""``HostOptimizer``: the shared machinery of anyaccel's CPU optimizers (a drop-in ``Optimizer``).

Each step runs a compiled kernel once per parameter over fp32 master weights and their state,
and can write a bf16/fp16 copy of the parameters in the same pass (the offload case).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, ClassVar

import torch
from torch.optim.optimizer import ParamsT, StateDict

from anyaccel.ops.builder import OpBuilder
from anyaccel.ops.checkpoint import prepare_checkpoint
from anyaccel.ops.hyperparams import Rule, validate, with_torch_keys

#: Low-precision copy dtypes a kernel can write, with the kernel's code for each.
COPY_KINDS: dict[torch.dtype, int] = {torch.bfloat16: 1, torch.float16: 2}

#: What ``step(fp16_param_groups=...)`` accepts: one list of copies per group, or a flat list.
CopyGroups = Sequence[Sequence[torch.Tensor | None]] | Sequence[torch.Tensor | None]


class HostOptimizer(torch.optim.Optimizer):
    """A ``torch.optim.Optimizer`` whose update runs in a compiled CPU kernel.

    A subclass names its builder and kernel function, its hyperparameter rules and torch
    counterpart, and says which state tensors (``_state_addresses``) and scalars
    (``_scalars``) its kernel takes.
    """

    #: The builder of the kernel this optimizer calls.
    builder_class: ClassVar[type[OpBuilder]]
    #: The name of the kernel's step function, e.g. ``"adam_step"``.
    kernel_function: ClassVar[str]
    #: The rules its hyperparameters follow (``anyaccel.ops.hyperparams``).
    hyperparameter_rules: ClassVar[Mapping[str, Rule]]
    #: The ``torch.optim`` class of the same algorithm, whose group keys ours carry (or None).
    torch_counterpart: ClassVar[str | None] = None
    #: The per-parameter state tensors, each shaped like its parameter.
    state_tensor_keys: ClassVar[tuple[str, ...]] = ()
    #: Other optimizers' names for our state tensors (theirs to ours), translated at load.
    state_key_aliases: ClassVar[Mapping[str, str]] = {}

    def __init__(self, params: ParamsT, defaults: dict[str, Any]) -> None:
        validate(self.hyperparameter_rules, defaults)
        super().__init__(params, with_torch_keys(defaults, self.torch_counterpart))
        self.kernel  # noqa: B018  (load now: a build failure surfaces at construction)

    @property
    def kernel(self) -> ModuleType:
        """The compiled kernel, loaded through the builder on first use (and after a copy)."""
        kernel = self.__dict__.get("_kernel")
        if kernel is None:
            kernel = self.__dict__["_kernel"] = self.builder_class().load()
        return kernel

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """torch's ``add_param_group``, after checking the group's own hyperparameters."""
        if isinstance(param_group, dict):
            where = f"param group {len(getattr(self, 'param_groups', ()))}"
            validate(self.hyperparameter_rules, param_group, where)
            self._prepare_param_group(param_group, where)
        super().add_param_group(param_group)

    def _prepare_param_group(self, param_group: dict[str, Any], where: str) -> None:
        """Reconcile a new group's own keys before torch fills in the defaults (per optimizer)."""

    def load_state_dict(self, state_dict: StateDict) -> None:
        """torch's ``load_state_dict``: the checkpoint's hyperparameters, translated and checked.

        Accepts torch.optim's and DeepSpeed's state dicts for the same algorithm. Raises
        ``ValueError`` (``CheckpointMismatchError`` for a checkpoint of other parameters) or
        ``TypeError`` before anything is loaded.
        """
        super().load_state_dict(prepare_checkpoint(self, state_dict))

    def _translate_checkpoint_group(
        self, group: dict[str, Any], current: Mapping[str, Any]
    ) -> None:
        """Map another optimizer's group keys in a checkpoint ``group`` to ours (per optimizer)."""

    def __getstate__(self) -> dict[str, Any]:
        """Everything but the compiled kernel (not picklable) and torch's hooks (as torch drops)."""
        return {
            key: value
            for key, value in self.__dict__.items()
            if key != "_kernel" and not key.startswith("_optimizer_")
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        """torch's ``__setstate__``, without adding keys our defaults never had."""
        had_differentiable = "differentiable" in state.get(
            "defaults", self.__dict__.get("defaults", {})
        )
        super().__setstate__(state)
        if not had_differentiable:
            self.defaults.pop("differentiable", None)

    def _state_addresses(
        self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> tuple[int, ...]:
        """The addresses of ``param``'s state tensors in the kernel's order, creating any absent.

        0 stands for a state the group does not use. Implemented per optimizer.
        """
        raise NotImplementedError

    def _scalars(self, group: dict[str, Any], step: int) -> tuple[float | int | bool, ...]:
        """The kernel's arguments between the element count and the thread count.

        ``step`` is this parameter's step count after the increment. Implemented per optimizer.
        """
        raise NotImplementedError

    @torch.no_grad()
    def step(  # type: ignore[override]
        self,
        closure: Callable[[], float] | None = None,
        fp16_param_groups: CopyGroups | None = None,
    ) -> float | None:
        """One step; ``fp16_param_groups`` are bf16/fp16 copies refreshed in the same pass."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        copies = self._copies_by_group(fp16_param_groups)
        threads = torch.get_num_threads()
        kernel_step = getattr(self.kernel, self.kernel_function)
        for group_index, group in enumerate(self.param_groups):
            for param_index, param in enumerate(group["params"]):
                if param.grad is None:
                    continue
                copy = copies[group_index][param_index] if copies is not None else None
                grad = _dense_fp32_grad(param)
                _check_param(param, copy)
                state = self.state[param]
                addresses = self._state_addresses(param, state, group)
                step = self._next_step(state)
                copy_ptr, copy_kind = copy_address(copy)
                # Every kernel takes (param, grad, *states, copy, kind, numel, *scalars, threads).
                kernel_step(
                    param.data_ptr(),
                    grad.data_ptr(),
                    *addresses,
                    copy_ptr,
                    copy_kind,
                    param.numel(),
                    *self._scalars(group, step),
                    threads,
                )
        return loss

    def _copies_by_group(
        self, fp16_param_groups: CopyGroups | None
    ) -> list[list[torch.Tensor | None]] | None:
        """Normalise the copies argument to one list per param group, checking its shape."""
        if fp16_param_groups is None:
            return None
        items = list(fp16_param_groups)
        if len(self.param_groups) == 1 and all(
            item is None or isinstance(item, torch.Tensor) for item in items
        ):
            grouped = [list(items)]
        else:
            grouped = [list(group) for group in items]  # type: ignore[arg-type]
        expected = [len(group["params"]) for group in self.param_groups]
        actual = [len(group) for group in grouped]
        if actual != expected:
            raise ValueError(
                f"fp16_param_groups has {actual} copies per group but the optimizer has "
                f"{expected} params per group; pass one copy (or None) per parameter"
            )
        return grouped  # type: ignore[return-value]

    @staticmethod
    def _state_tensor(
        param: torch.Tensor, state: dict[str, Any], key: str, initial: float = 0.0
    ) -> torch.Tensor:
        """``state[key]`` as a contiguous fp32 tensor like ``param`` (all ``initial`` if absent)."""
        value = state.get(key)
        if not isinstance(value, torch.Tensor):
            value = torch.full_like(param, initial, memory_format=torch.contiguous_format)
            state[key] = value
        elif not value.is_contiguous() or value.dtype != torch.float32:
            value = value.to(torch.float32).contiguous()
            state[key] = value
        return value

    @staticmethod
    def _next_step(state: dict[str, Any]) -> int:
        """Advance and return the step count (kept as a float tensor, as torch's optimizers do)."""
        step = state.get("step")
        if not isinstance(step, torch.Tensor):
            step = torch.tensor(float(step or 0.0), dtype=torch.float32)
            state["step"] = step
        step += 1
        return int(step.item())


def require_fp32_states(fp32_optimizer_states: bool) -> None:
    """Refuse DeepSpeed's ``fp32_optimizer_states=False``: the kernels keep fp32 states."""
    if not fp32_optimizer_states:
        raise ValueError(
            "fp32_optimizer_states=False is not supported: anyaccel keeps optimizer "
            "states in fp32; pass fp32_optimizer_states=True"
        )


def copy_address(copy: torch.Tensor | None) -> tuple[int, int]:
    """The kernel's (address, kind) arguments for an optional low-precision copy."""
    if copy is None:
        return 0, 0
    return copy.data_ptr(), COPY_KINDS[copy.dtype]


def _dense_fp32_grad(param: torch.Tensor) -> torch.Tensor:
    """``param.grad`` as a dense contiguous fp32 tensor (converted only when it is not one)."""
    grad = param.grad
    assert grad is not None
    if grad.is_sparse:
        raise RuntimeError(
            "anyaccel CPU optimizers do not support sparse gradients; "
            "use torch.optim.SparseAdam for sparse embeddings"
        )
    if grad.dtype != torch.float32:
        grad = grad.to(torch.float32)
    return grad.contiguous()


def _check_param(param: torch.Tensor, copy: torch.Tensor | None) -> None:
    """Reject parameters and copies the kernels cannot update in place, saying what to do."""
    if param.device.type != "cpu" or param.dtype != torch.float32:
        raise TypeError(
            f"anyaccel CPU optimizers update fp32 CPU parameters, got {param.dtype} on "
            f"{param.device}; keep fp32 master weights on the CPU and pass low-precision "
            "copies through step(fp16_param_groups=...)"
        )
    if not param.is_contiguous():
        raise ValueError(
            f"parameter of shape {tuple(param.shape)} is not contiguous; "
            "make it contiguous (param.data = param.data.contiguous()) before optimizing"
        )
    if copy is None:
        return
    if copy.dtype not in COPY_KINDS or copy.device.type != "cpu":
        raise TypeError(
            f"parameter copies must be bfloat16 or float16 CPU tensors, got {copy.dtype} on "
            f"{copy.device}"
        )
    if copy.shape != param.shape or not copy.is_contiguous():
        raise ValueError(
            f"copy of shape {tuple(copy.shape)} does not match parameter of shape "
            f"{tuple(param.shape)} (or is not contiguous); allocate it with "
            "torch.empty_like(param, dtype=torch.bfloat16)"
        )
