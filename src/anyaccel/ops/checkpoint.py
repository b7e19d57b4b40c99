"""Checkpoint interchange: optimizer state dicts move between anyaccel, torch.optim and DeepSpeed.

torch's rule holds: ``load_state_dict`` takes the checkpoint's group hyperparameters. Before
anything is loaded, ``prepare_checkpoint`` translates another optimizer's keys into ours
(torch's ``decoupled_weight_decay``, DeepSpeed Adagrad's ``exp_avg_sq``), validates every
group as the constructor would, and refuses state tensors that do not fit their parameters,
so a refused checkpoint leaves the optimizer exactly as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import chain
from typing import Any, Protocol

import torch

from anyaccel.errors import AnyaccelError
from anyaccel.ops.hyperparams import Rule, torch_keys_we_cannot_check, validate


class CheckpointMismatchError(AnyaccelError, ValueError):
    """A state dict that cannot be loaded into this optimizer; nothing was loaded."""


class CheckpointTarget(Protocol):
    """What checkpoint preparation reads of an optimizer (``HostOptimizer`` answers it).

    A protocol rather than an import, so this module stays below ``host_optimizer``.
    """

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The optimizer's param groups."""

    @property
    def hyperparameter_rules(self) -> Mapping[str, Rule]:
        """The rules its group hyperparameters follow."""

    @property
    def torch_counterpart(self) -> str | None:
        """The ``torch.optim`` class whose group keys it carries, or None."""

    @property
    def state_tensor_keys(self) -> tuple[str, ...]:
        """Its per-parameter state tensors' keys."""

    @property
    def state_key_aliases(self) -> Mapping[str, str]:
        """Other optimizers' names for its state tensors (theirs to ours)."""

    def _translate_checkpoint_group(
        self, group: dict[str, Any], current: Mapping[str, Any]
    ) -> None:
        """Map another optimizer's group keys in a checkpoint ``group`` to its own."""


def prepare_checkpoint(
    optimizer: CheckpointTarget, state_dict: Mapping[str, Any]
) -> dict[str, Any]:
    """A copy of ``state_dict`` that ``optimizer`` can load as is, or raise saying why not.

    Groups take the checkpoint's hyperparameters; keys the checkpoint lacks keep this
    optimizer's values. Raises ``CheckpointMismatchError`` (a ``ValueError``) for a checkpoint
    of another shape, ``ValueError``/``TypeError`` for a hyperparameter we cannot honour.
    """
    if not isinstance(state_dict, Mapping) or not {"state", "param_groups"} <= state_dict.keys():
        raise CheckpointMismatchError(
            "an optimizer state dict has 'state' and 'param_groups' entries; got "
            f"{type(state_dict).__name__} with keys {sorted(map(str, state_dict))[:8]}"
            if isinstance(state_dict, Mapping)
            else f"an optimizer state dict is a dict, got {type(state_dict).__name__}"
        )
    saved_groups = list(state_dict["param_groups"])
    _check_group_sizes(optimizer, saved_groups)
    groups = [
        _prepare_group(optimizer, index, dict(saved), current)
        for index, (saved, current) in enumerate(
            zip(saved_groups, optimizer.param_groups, strict=True)
        )
    ]
    state = _prepare_state(optimizer, state_dict["state"], groups)
    return {**state_dict, "state": state, "param_groups": groups}


def _check_group_sizes(optimizer: CheckpointTarget, saved_groups: list[Any]) -> None:
    """The checkpoint has as many groups as the optimizer, each with as many parameters."""
    if len(saved_groups) != len(optimizer.param_groups):
        raise CheckpointMismatchError(
            f"the checkpoint has {len(saved_groups)} param groups but the optimizer has "
            f"{len(optimizer.param_groups)}; build the optimizer with the same groups as the "
            "one that saved it"
        )
    for index, (saved, current) in enumerate(
        zip(saved_groups, optimizer.param_groups, strict=True)
    ):
        if not isinstance(saved, Mapping) or "params" not in saved:
            raise CheckpointMismatchError(
                f"checkpoint param group {index} is not a dict with a 'params' list"
            )
        if len(saved["params"]) != len(current["params"]):
            raise CheckpointMismatchError(
                f"checkpoint param group {index} has {len(saved['params'])} parameters but the "
                f"optimizer's has {len(current['params'])}; the checkpoint was saved for "
                "another parameter list"
            )


def _prepare_group(
    optimizer: CheckpointTarget, index: int, group: dict[str, Any], current: Mapping[str, Any]
) -> dict[str, Any]:
    """One checkpoint group translated to our keys and checked like a constructor's values."""
    where = f"checkpoint param group {index}"
    optimizer._translate_checkpoint_group(group, current)
    for key, value in current.items():
        if key != "params":
            group.setdefault(key, value)
    validate(optimizer.hyperparameter_rules, group, where)
    if optimizer.torch_counterpart is not None:
        unknown = torch_keys_we_cannot_check(
            optimizer.torch_counterpart, optimizer.hyperparameter_rules
        )
        for key, default in unknown.items():
            if key in group and not _same(group[key], default):
                raise ValueError(
                    f"{where}: {key}={group[key]!r} is not supported by "
                    f"{type(optimizer).__name__}, which follows torch's default {key}="
                    f"{default!r}; set the group's {key!r} to {default!r} to load it"
                )
    return group


def _same(value: Any, default: Any) -> bool:
    """Whether a checkpoint value equals torch's default (without tensor truthiness errors)."""
    try:
        return bool(value == default)
    except (RuntimeError, TypeError, ValueError):
        return False


def _prepare_state(
    optimizer: CheckpointTarget, saved_state: Mapping[Any, Any], groups: list[dict[str, Any]]
) -> dict[Any, Any]:
    """Per-parameter state with our key names, each tensor checked against its parameter."""
    params = chain.from_iterable(group["params"] for group in optimizer.param_groups)
    places = [
        (group_index, param_index)
        for group_index, group in enumerate(groups)
        for param_index in range(len(group["params"]))
    ]
    by_id = {
        saved_id: (param, place)
        for saved_id, param, place in zip(
            chain.from_iterable(group["params"] for group in groups), params, places, strict=True
        )
    }
    state: dict[Any, Any] = {}
    for saved_id, entry in saved_state.items():
        if saved_id not in by_id or not isinstance(entry, Mapping):
            state[saved_id] = entry  # kept as torch keeps it
            continue
        param, (group_index, param_index) = by_id[saved_id]
        entry = _rename_aliases(optimizer, dict(entry))
        for key in optimizer.state_tensor_keys:
            value = entry.get(key)
            if value is not None and not isinstance(value, torch.Tensor):
                raise CheckpointMismatchError(
                    f"checkpoint state for param group {group_index}, index {param_index}: "
                    f"{key!r} is a {type(value).__name__}, not a tensor; the checkpoint is "
                    "damaged or from another optimizer"
                )
            if isinstance(value, torch.Tensor) and value.shape != param.shape:
                raise CheckpointMismatchError(
                    f"checkpoint state for param group {group_index}, index {param_index}: "
                    f"{key!r} has shape {tuple(value.shape)} but the parameter has shape "
                    f"{tuple(param.shape)}; the checkpoint was saved for other parameters "
                    "(re-ordered or resized?), so it cannot be loaded into this optimizer"
                )
        step = entry.get("step")
        if step is not None and not _is_step_count(step):
            raise CheckpointMismatchError(
                f"checkpoint state for param group {group_index}, index {param_index}: 'step' "
                f"must be a count (a number or a one-element tensor), got {step!r}"
            )
        if step is not None and not isinstance(step, torch.Tensor):
            # torch's Adam and Adagrad turn a numeric step into a float32 tensor on load.
            entry["step"] = torch.tensor(float(step), dtype=torch.float32)
        state[saved_id] = entry
    return state


def _rename_aliases(optimizer: CheckpointTarget, entry: dict[str, Any]) -> dict[str, Any]:
    """Another optimizer's name for one of our state tensors becomes ours."""
    for theirs, ours in optimizer.state_key_aliases.items():
        if theirs in entry and ours not in entry:
            entry[ours] = entry.pop(theirs)
    return entry


def _is_step_count(step: Any) -> bool:
    """A step count is a real number or a one-element real tensor."""
    if isinstance(step, torch.Tensor):
        return step.numel() == 1 and not step.is_complex()
    return isinstance(step, int | float) and not isinstance(step, bool)
