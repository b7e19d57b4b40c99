"""``HostOptimizer``: the shared machinery of anyaccel's CPU optimizers (a drop-in ``Optimizer``).

Each step checks every group, then runs one compiled call per param group over all its
tensors (fp32, bf16 or fp16 parameters, fp32 or low-precision states), optionally writing a
bf16/fp16 copy of the parameters in the same pass (the offload case).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, ClassVar, NamedTuple, cast

import torch
from torch.optim.optimizer import ParamsT, StateDict

from anyaccel.forksafe import native_threads
from anyaccel.ops.builder import OpBuilder
from anyaccel.ops.checkpoint import prepare_checkpoint
from anyaccel.ops.hyperparams import Rule, validate, with_torch_keys

#: What ``step(fp16_param_groups=...)`` accepts: one list of copies per group, or a flat list.
CopyGroups = Sequence[Sequence[torch.Tensor | None]] | Sequence[torch.Tensor | None]


class SubgroupBackup(NamedTuple):
    """What a subgroup step overwrote: its parameter's and states' values before it."""

    param: torch.Tensor
    value: torch.Tensor
    states: dict[str, torch.Tensor]
    initial: dict[str, float]


class HostOptimizer(torch.optim.Optimizer):
    """A ``torch.optim.Optimizer`` whose update runs in a compiled CPU kernel.

    A subclass names its builder and kernel function, its hyperparameter rules and torch
    counterpart, and says which state tensors (``_state_specs``) and group scalars
    (``_group_scalars``) its kernel takes.
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
    #: False keeps states in the parameter's dtype (DeepSpeed's ``fp32_optimizer_states``).
    fp32_optimizer_states: bool = True

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
        prepared = prepare_checkpoint(self, state_dict)
        super().load_state_dict(prepared)
        self._restore_state_precision(prepared)

    def _restore_state_precision(self, loaded: StateDict) -> None:
        """Undo torch's cast of states to a bf16/fp16 parameter's dtype when states are fp32.

        ``torch.optim.Optimizer.load_state_dict`` casts every state tensor to its parameter's
        dtype; our kernels keep fp32 states for low-precision parameters (as DeepSpeed does), so
        those are taken from the checkpoint again, converted to fp32 without the lossy detour.
        """
        if not self.fp32_optimizer_states:
            return
        saved_ids = [i for group in loaded["param_groups"] for i in group["params"]]
        params = [p for group in self.param_groups for p in group["params"]]
        for saved_id, param in zip(saved_ids, params, strict=True):
            saved = loaded["state"].get(saved_id)
            if param.dtype == torch.float32 or not isinstance(saved, Mapping):
                continue
            for key in self.state_tensor_keys:
                value = saved.get(key)
                if isinstance(value, torch.Tensor) and value.is_floating_point():
                    self.state[param][key] = value.to(device="cpu", dtype=torch.float32)

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

    def _state_specs(self, group: dict[str, Any]) -> tuple[tuple[str, float], ...]:
        """The state tensors the kernel keeps per parameter, in its order: (key, initial value)."""
        raise NotImplementedError

    def _group_scalars(self, group: dict[str, Any]) -> tuple[float | bool, ...]:
        """The kernel's arguments after the plan and before the thread count."""
        raise NotImplementedError

    @torch.no_grad()
    def step(  # type: ignore[override]
        self,
        closure: Callable[[], float] | None = None,
        fp16_param_groups: CopyGroups | None = None,
    ) -> float | None:
        """One step; ``fp16_param_groups`` are bf16/fp16 copies refreshed in the same pass.

        The whole step is checked before anything is written: a state, gradient or copy that
        does not fit its parameter raises ``ValueError``/``TypeError`` with nothing changed.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        copies = self._copies_by_group(fp16_param_groups)
        self._run(self._prepare(copies, None))
        return loss

    @torch.no_grad()
    def step_subgroup(self, subgroup_id: int, closure: Callable[[], float] | None = None) -> Any:
        """DeepSpeed's ZeRO-3 step of one subgroup: its parameter's state is ``state[subgroup_id]``.

        One parameter (the subgroup's partition) may have a gradient; its step count is the
        subgroup's. A copy of what the step overwrites is kept, so ``rollback_subgroup`` undoes
        the latest step exactly (set ``keep_rollback_copy = False`` to save that memory).
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        plans = self._prepare(None, subgroup_id)
        stepped = [(p, g) for g in self.param_groups for p in g["params"] if p.grad is not None]
        if len(stepped) > 1:
            raise ValueError(
                f"step_subgroup({subgroup_id!r}) steps one parameter (the subgroup's partition), "
                f"but {len(stepped)} parameters have gradients; put only the subgroup's "
                "parameter in param_groups[0]['params']"
            )
        if not stepped:
            return loss
        backups: dict[Any, SubgroupBackup] = self.__dict__.setdefault("_subgroup_backups", {})
        backups.pop(subgroup_id, None)
        if getattr(self, "keep_rollback_copy", True):
            param, group = stepped[0]
            state = cast("dict[Any, Any]", self.state).get(subgroup_id, {})
            backups[subgroup_id] = SubgroupBackup(
                param,
                param.detach().clone(),
                {k: v.clone() for k, v in state.items() if isinstance(v, torch.Tensor)},
                dict(self._state_specs(group)),
            )
        self._run(plans)
        return loss

    @torch.no_grad()
    def rollback_subgroup(
        self, subgroup_id: int, closure: Callable[[], float] | None = None
    ) -> Any:
        """Undo the latest ``step_subgroup(subgroup_id)``; RuntimeError if it never stepped."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        state = cast("dict[Any, Any]", self.state).get(subgroup_id)
        if not state:
            raise RuntimeError(
                f"Cannot rollback optimizer state for sub_group_id {subgroup_id} as it has not "
                "been initialized (no step_subgroup ran for it)."
            )
        step = state.get("step", 0)
        if float(step) <= 0:
            raise RuntimeError(
                f"Cannot rollback sub_group_id {subgroup_id}: step count is {int(float(step))}"
            )
        backup = self.__dict__.get("_subgroup_backups", {}).pop(subgroup_id, None)
        if backup is None:
            self._inverse_subgroup_step(subgroup_id, state)
        else:
            backup.param.copy_(backup.value)
            for key, tensor in state.items():
                if key == "step" or not isinstance(tensor, torch.Tensor):
                    continue
                if key in backup.states:
                    tensor.copy_(backup.states[key])
                else:  # created by the step: back to its initial value
                    tensor.fill_(backup.initial.get(key, 0.0))
        if isinstance(state["step"], torch.Tensor):
            state["step"] -= 1
        else:
            state["step"] = state["step"] - 1
        return loss

    def _inverse_subgroup_step(self, subgroup_id: int, state: dict[str, Any]) -> None:
        """Undo an older subgroup step algebraically; only optimizers that can invert do."""
        raise RuntimeError(
            f"Cannot rollback sub_group_id {subgroup_id}: only its latest step can be rolled "
            f"back with {type(self).__name__}"
        )

    def _prepare(
        self, copies: list[list[torch.Tensor | None]] | None, shared_key: object
    ) -> list[tuple[Any, dict[str, Any]]]:
        """One checked plan per group (``shared_key``: one state for all, as subgroups keep)."""
        plans = []
        for index, group in enumerate(self.param_groups):
            plan = self.kernel.prepare(
                group["params"],
                self.state,
                shared_key,
                None if copies is None else copies[index],
                self._state_specs(group),
                not self.fp32_optimizer_states,
                index,
            )
            plans.append((plan, group))
        return plans

    def _run(self, plans: list[tuple[Any, dict[str, Any]]]) -> None:
        """Step each prepared group in one native call."""
        threads = native_threads(torch.get_num_threads())
        kernel_step = getattr(self.kernel, self.kernel_function)
        for plan, group in plans:
            if len(plan):
                kernel_step(plan, *self._group_scalars(group), threads)

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
