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
from anyaccel.ops.optimizer_errors import (
    OptimizerTypeError,
    OptimizerValueError,
    as_optimizer_error,
)

#: What ``step(fp16_param_groups=...)`` accepts: one list of copies per group, or a flat list.
CopyGroups = Sequence[Sequence[torch.Tensor | None]] | Sequence[torch.Tensor | None]


class SubgroupBackup(NamedTuple):
    """What a subgroup step overwrote: its parameter's and states' values before it."""

    param: torch.Tensor
    value: torch.Tensor
    states: dict[str, torch.Tensor]
    initial: dict[str, float]


#: What to do about a parameter list torch.optim.Optimizer refuses.
PARAMS_FIX = (
    "as torch.optim refuses it, so does anyaccel: pass a non-empty list of leaf tensors (e.g. "
    "model.parameters()) or of param-group dicts, each parameter in one group only"
)


class AmpScaling(NamedTuple):
    """What ``torch.amp.GradScaler`` handed a fused optimizer for this step."""

    #: The gradients are divided by it before the update (None: they are already unscaled).
    grad_scale: torch.Tensor | None
    #: A non-finite gradient was found: the step is skipped (states created, nothing moved).
    skip: bool


class GroupRounds(NamedTuple):
    """A param group listing a parameter more than once, stepped as torch steps it.

    torch's loop steps each occurrence in turn on one shared state; so are ours, in rounds:
    round k holds the k-th occurrence of each parameter (its indices in the group).
    """

    rounds: list[list[int]]
    copies: list[torch.Tensor | None] | None
    group_index: int


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

    def __init__(
        self, params: ParamsT, defaults: dict[str, Any], *, fused: bool | None = None
    ) -> None:
        validate(self.hyperparameter_rules, defaults)
        try:  # torch's own refusals (an empty or non-leaf parameter list) as ours
            super().__init__(params, with_torch_keys(defaults, self.torch_counterpart))
        except (TypeError, ValueError) as exc:
            raise as_optimizer_error(exc, PARAMS_FIX) from None
        if fused if fused is not None else defaults.get("fused"):
            # As torch's fused optimizers: GradScaler hands grad_scale/found_inf to step().
            self._step_supports_amp_scaling = True
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
        try:  # torch's own refusals (a parameter in two groups) as ours
            super().add_param_group(param_group)
        except (TypeError, ValueError) as exc:
            raise as_optimizer_error(exc, PARAMS_FIX) from None

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
        does not fit its parameter raises ``ValueError``/``TypeError`` (a ``RuntimeError`` for a
        parameter that cannot be written) with nothing changed. With ``fused=True``,
        ``torch.amp.GradScaler`` sets ``grad_scale`` and ``found_inf`` on the optimizer, as for
        torch's fused optimizers: gradients are divided by ``grad_scale`` in place, and a step
        with a nonzero ``found_inf`` moves nothing (missing states are created at step 0).
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._step_dense(self._copies_by_group(fp16_param_groups), self._amp_scaling())
        return loss

    def _step_dense(
        self, copies: list[list[torch.Tensor | None]] | None, scaling: AmpScaling
    ) -> None:
        """Check every group, then (unless GradScaler skips it) unscale and step each."""
        plans = self._prepare(copies, None)
        if scaling.skip:
            self._create_states(plans)
            return
        if scaling.grad_scale is not None:
            _unscale(_dense_grads(plans), scaling.grad_scale)
        self._run(plans)

    def _amp_scaling(self) -> AmpScaling:
        """The ``grad_scale``/``found_inf`` torch.amp.GradScaler set on this optimizer, checked."""
        grad_scale = getattr(self, "grad_scale", None)
        found_inf = getattr(self, "found_inf", None)
        if grad_scale is None and found_inf is None:
            return AmpScaling(None, False)
        scale = None if grad_scale is None else _scalar_tensor("grad_scale", grad_scale)
        if scale is not None and not (torch.isfinite(scale) and scale > 0):
            raise OptimizerValueError(
                f"grad_scale={float(scale)!r} cannot unscale the gradients: it must be a finite "
                "number > 0 (torch.amp.GradScaler sets it to its current scale)"
            )
        skip = found_inf is not None and float(_scalar_tensor("found_inf", found_inf)) != 0.0
        return AmpScaling(scale, skip)

    def _create_states(self, plans: list[tuple[Any, dict[str, Any]]]) -> None:
        """A step GradScaler skips: each stepped parameter gets its states, at step 0, as torch's.

        torch's fused optimizers create the states, advance the step count and take it back.
        """
        for _, group in plans:
            specs = self._state_specs(group)
            for param in group["params"]:
                if param.grad is None or param.grad.is_sparse:
                    continue
                state = self.state[param]
                dtype = torch.float32 if self.fp32_optimizer_states else param.dtype
                for key, initial in specs:
                    if not isinstance(state.get(key), torch.Tensor):
                        state[key] = torch.full(param.shape, initial, dtype=dtype)
                state.setdefault("step", torch.tensor(0.0, dtype=torch.float32))

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
        """One checked plan per group (``shared_key``: one state for all, as subgroups keep).

        A group listing a parameter twice gets ``GroupRounds`` instead, every round checked.
        """
        plans: list[tuple[Any, dict[str, Any]]] = []
        for index, group in enumerate(self.param_groups):
            group_copies = None if copies is None else copies[index]
            plan = self._plan(group["params"], shared_key, group_copies, group, index)
            if shared_key is None and plan.duplicates:
                plan = self._rounds(group, group_copies, index)
            plans.append((plan, group))
        return plans

    def _plan(
        self,
        params: list[torch.Tensor],
        shared_key: object,
        copies: list[torch.Tensor | None] | None,
        group: dict[str, Any],
        index: int,
    ) -> Any:
        """The kernel's checked plan for ``params``; its refusals raised as our errors."""
        try:
            return self.kernel.prepare(
                params,
                self.state,
                shared_key,
                copies,
                self._state_specs(group),
                not self.fp32_optimizer_states,
                index,
            )
        except (TypeError, ValueError, RuntimeError) as exc:
            raise as_optimizer_error(exc, from_kernel=True) from None

    def _rounds(
        self, group: dict[str, Any], copies: list[torch.Tensor | None] | None, index: int
    ) -> GroupRounds:
        """Split a group with repeated parameters into rounds, checking each one now."""
        occurrences: dict[int, int] = {}
        rounds: list[list[int]] = []
        for position, param in enumerate(group["params"]):
            round_index = occurrences.get(id(param), 0)
            occurrences[id(param)] = round_index + 1
            if round_index == len(rounds):
                rounds.append([])
            rounds[round_index].append(position)
        for positions in rounds:  # checked now, stepped (and planned again) after the earlier
            self._round_plan(group, copies, index, positions)
        return GroupRounds(rounds, copies, index)

    def _round_plan(
        self,
        group: dict[str, Any],
        copies: list[torch.Tensor | None] | None,
        index: int,
        positions: list[int],
    ) -> Any:
        """The plan of one round: the group's parameters (and copies) at ``positions``."""
        params = [group["params"][k] for k in positions]
        round_copies = None if copies is None else [copies[k] for k in positions]
        return self._plan(params, None, round_copies, group, index)

    def _run(self, plans: list[tuple[Any, dict[str, Any]]]) -> None:
        """Step each prepared group in one native call (a group in rounds: one per round)."""
        threads = native_threads(torch.get_num_threads())
        kernel_step = getattr(self.kernel, self.kernel_function)
        for plan, group in plans:
            if isinstance(plan, GroupRounds):
                for positions in plan.rounds:
                    round_plan = self._round_plan(group, plan.copies, plan.group_index, positions)
                    kernel_step(round_plan, *self._group_scalars(group), threads)
            elif len(plan):
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
            raise OptimizerValueError(
                f"fp16_param_groups has {actual} copies per group but the optimizer has "
                f"{expected} params per group; pass one copy (or None) per parameter"
            )
        return grouped  # type: ignore[return-value]


def _scalar_tensor(name: str, value: object) -> torch.Tensor:
    """GradScaler's ``grad_scale``/``found_inf`` as a one-element float32 CPU tensor."""
    if isinstance(value, bool) or not isinstance(value, torch.Tensor | int | float):
        raise OptimizerTypeError(
            f"{name}={value!r} ({type(value).__name__}) is not a number: torch.amp.GradScaler "
            f"sets optimizer.{name} to a one-element tensor; delete the attribute or set one"
        )
    tensor = torch.as_tensor(value)
    if tensor.numel() != 1 or tensor.is_complex():
        raise OptimizerValueError(
            f"{name} must be a one-element real tensor (as torch.amp.GradScaler sets it), got "
            f"shape {tuple(tensor.shape)} of {tensor.dtype}"
        )
    return tensor.detach().reshape(()).to(device="cpu", dtype=torch.float32)


def _dense_grads(plans: list[tuple[Any, dict[str, Any]]]) -> list[torch.Tensor]:
    """Each distinct dense gradient of the planned groups, once (a repeated parameter too)."""
    seen: set[int] = set()
    grads = []
    for _, group in plans:
        for param in group["params"]:
            grad = param.grad
            if grad is not None and not grad.is_sparse and id(grad) not in seen:
                seen.add(id(grad))
                grads.append(grad)
    return grads


def _unscale(grads: list[torch.Tensor], grad_scale: torch.Tensor) -> None:
    """Divide ``grads`` in place by ``grad_scale``, as torch's fused optimizers unscale them."""
    if grads:
        torch._foreach_div_(grads, grad_scale)
