"""One validator for the CPU optimizers' hyperparameters, with ``torch.optim``'s rules.

Each optimizer has a rule book (hyperparameter name to ``Rule``); ``validate`` applies it to
the constructor's values, to every param group's own values and to a loaded checkpoint's
groups, so all of them accept and refuse the same kinds of values as torch's optimizers.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from enum import Enum
from typing import Any, NamedTuple

import torch

from anyaccel.ops.optimizer_errors import (
    OptimizerIndexError,
    OptimizerTypeError,
    OptimizerValueError,
    OptimizerValueRuntimeError,
)


class Kind(str, Enum):
    """What kind of value a hyperparameter takes."""

    NONNEGATIVE = "a number >= 0 (or a one-element tensor)"
    BETAS = "a pair of numbers in [0, 1)"
    FLAG = "True or False"
    OPTIONAL_FLAG = "None, True or False"
    FALSE_ONLY = "False"


class Rule(NamedTuple):
    """How one hyperparameter is checked, and the words its errors use."""

    kind: Kind
    #: torch's name for it in its own errors, e.g. "learning rate".
    label: str
    #: For ``FALSE_ONLY``: why True cannot be honoured, and what to do instead.
    refusal: str = ""


#: The keyword arguments ``torch.optim`` optimizers share, and what anyaccel makes of them.
TORCH_KEYWORD_RULES: dict[str, Rule] = {
    "maximize": Rule(Kind.FLAG, "maximize"),
    "foreach": Rule(Kind.OPTIONAL_FLAG, "foreach"),
    "fused": Rule(Kind.OPTIONAL_FLAG, "fused"),
    "capturable": Rule(
        Kind.FALSE_ONLY,
        "capturable",
        "capturable=True makes a step safe to capture in a CUDA graph; anyaccel's CPU "
        "optimizers step on the host, where torch's own optimizers refuse it too. Pass "
        "capturable=False (or set the checkpoint group's 'capturable' to False)",
    ),
    "differentiable": Rule(
        Kind.FALSE_ONLY,
        "differentiable",
        "anyaccel's CPU optimizers update parameters in place in a native kernel, outside "
        "autograd, so a step cannot be differentiated. Use the torch.optim optimizer for "
        "differentiable=True, or pass differentiable=False",
    ),
}

ADAM_RULES: dict[str, Rule] = {
    "lr": Rule(Kind.NONNEGATIVE, "learning rate"),
    "betas": Rule(Kind.BETAS, "beta parameter"),
    "eps": Rule(Kind.NONNEGATIVE, "epsilon value"),
    "weight_decay": Rule(Kind.NONNEGATIVE, "weight_decay value"),
    "amsgrad": Rule(Kind.FLAG, "amsgrad"),
    "adamw_mode": Rule(Kind.FLAG, "adamw_mode"),
    "decoupled_weight_decay": Rule(Kind.FLAG, "decoupled_weight_decay"),
    "bias_correction": Rule(Kind.FLAG, "bias_correction"),
    **TORCH_KEYWORD_RULES,
}

ADAGRAD_RULES: dict[str, Rule] = {
    "lr": Rule(Kind.NONNEGATIVE, "learning rate"),
    "lr_decay": Rule(Kind.NONNEGATIVE, "lr_decay value"),
    "weight_decay": Rule(Kind.NONNEGATIVE, "weight_decay value"),
    "initial_accumulator_value": Rule(Kind.NONNEGATIVE, "initial_accumulator_value value"),
    "eps": Rule(Kind.NONNEGATIVE, "epsilon value"),
    **TORCH_KEYWORD_RULES,
}

#: Lion has no torch counterpart: its rules are the Adam family's (betas in [0, 1), as
#: DeepSpeed's and the paper's reference use them).
LION_RULES: dict[str, Rule] = {
    "lr": Rule(Kind.NONNEGATIVE, "learning rate"),
    "betas": Rule(Kind.BETAS, "beta parameter"),
    "weight_decay": Rule(Kind.NONNEGATIVE, "weight_decay value"),
    **TORCH_KEYWORD_RULES,
}


def validate(rules: Mapping[str, Rule], values: Mapping[str, Any], where: str = "") -> None:
    """Check every value in ``values`` that ``rules`` knows; raise naming the first bad one.

    ``where`` (e.g. ``"param group 1"``) prefixes the message. Raises ``OptimizerTypeError``
    for a value of the wrong kind (a string learning rate, a flag that is not a bool),
    ``OptimizerValueError`` for one out of range (negative, NaN, a beta of 1), one anyaccel
    cannot honour, or a keyword pair torch's fused optimizers refuse (every anyaccel optimizer
    error is also a ``RuntimeError``, the type torch raises for those); each message holds
    torch's own wording.
    """
    prefix = f"{where}: " if where else ""
    if _truthy_flag(values.get("fused")):
        for other, wording in (
            ("foreach", "`fused` and `foreach` cannot be `True` together."),
            ("differentiable", "`fused` does not support `differentiable`"),
        ):
            if other in rules and _truthy_flag(values.get(other)):
                raise OptimizerValueRuntimeError(
                    f"{prefix}{wording} (fused=True and {other}=True, as torch.optim refuses "
                    f"them too); pass only fused=True, or {other}=True without fused"
                )
    for key, value in values.items():
        rule = rules.get(key)
        if rule is not None:
            _check(key, value, rule, prefix)


def _check(key: str, value: Any, rule: Rule, prefix: str) -> None:
    """Apply one rule to one value."""
    if rule.kind is Kind.NONNEGATIVE:
        number = _as_number(key, value, rule.label, prefix)
        if not number >= 0.0:  # also refuses NaN, as torch's `not 0.0 <= value` does
            shown = number if isinstance(value, torch.Tensor) else value
            raise OptimizerValueError(
                f"{prefix}Invalid {rule.label}: {shown} ({key}={value!r}); pass a number >= 0"
            )
    elif rule.kind is Kind.BETAS:
        _check_betas(key, value, rule.label, prefix)
    elif rule.kind is Kind.FALSE_ONLY:
        _as_flag(key, value, prefix, optional=False)
        if value:
            raise OptimizerValueError(f"{prefix}{key}={value!r} is not supported: {rule.refusal}")
    else:
        _as_flag(key, value, prefix, optional=rule.kind is Kind.OPTIONAL_FLAG)


def _as_number(key: str, value: Any, label: str, prefix: str) -> float:
    """``value`` as a float if it is a real number or a one-element real tensor, else raise."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise OptimizerValueRuntimeError(
                f"{prefix}Tensor {key} must be 1-element: the {label} {key} is a tensor of shape "
                f"{tuple(value.shape)}; pass a number or a one-element tensor"
            )
        if value.is_complex():
            raise OptimizerTypeError(
                f"{prefix}invalid {label} {key}: a complex tensor is not a number"
            )
        return float(value.item())
    if isinstance(value, str | bytes) or value is None:
        raise OptimizerTypeError(
            f"{prefix}invalid {label} {key}={value!r} ({type(value).__name__}): pass a number, "
            f"e.g. {key}=1e-3, not a string or None"
        )
    try:
        return float(value)
    except (TypeError, ValueError):
        raise OptimizerTypeError(
            f"{prefix}invalid {label} {key}={value!r} ({type(value).__name__}): pass a number "
            "or a one-element tensor"
        ) from None


def _check_betas(key: str, value: Any, label: str, prefix: str) -> None:
    """Betas are a pair of numbers (or one-element tensors), each in ``[0, 1)``."""
    if isinstance(value, str | bytes | torch.Tensor) or not hasattr(value, "__len__"):
        raise OptimizerTypeError(
            f"{prefix}invalid {key}={value!r} ({type(value).__name__}): pass a pair of numbers "
            "in [0, 1), e.g. betas=(0.9, 0.999)"
        )
    if len(value) != 2:
        error = OptimizerIndexError if len(value) < 2 else OptimizerValueError  # as torch's
        raise error(
            f"{prefix}invalid {key}={value!r}: it must hold exactly two numbers in [0, 1), "
            f"got {len(value)}"
        )
    for index, beta in enumerate(value):
        number = _as_number(f"{key}[{index}]", beta, f"{label} at index {index}", prefix)
        if not 0.0 <= number < 1.0:
            shown = number if isinstance(beta, torch.Tensor) else beta
            raise OptimizerValueError(
                f"{prefix}Invalid {label} at index {index}: {shown} ({key}[{index}]={beta!r}); "
                "each beta must be in [0, 1)"
            )


def _as_flag(key: str, value: Any, prefix: str, optional: bool) -> None:
    """A flag is a bool (or 0/1); an optional one may also be None, meaning "torch decides"."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int) and value in (0, 1):
        return
    expected = Kind.OPTIONAL_FLAG.value if optional else Kind.FLAG.value
    raise OptimizerTypeError(
        f"{prefix}invalid {key}={value!r} ({type(value).__name__}): pass {expected}"
    )


def check_torch_betas(betas: Any) -> None:
    """torch.optim.Adam(W)'s rule on ``betas``: both floats or both (one-element) tensors.

    The constructors of the classes that stand in for torch's (``CPUAdam``, ``CPUAdamW``)
    apply it where the installed torch does, so what torch refuses they refuse alike.
    """
    if not _torch_checks_beta_types() or isinstance(betas, str | bytes | torch.Tensor):
        return
    pair = tuple(betas) if hasattr(betas, "__len__") and len(betas) == 2 else None
    if pair is None:
        return  # validate() names the bad length
    if not (
        all(isinstance(beta, float) for beta in pair)
        or all(isinstance(beta, torch.Tensor) for beta in pair)
    ):
        kinds = ", ".join(type(beta).__name__ for beta in pair)
        raise OptimizerValueError(
            f"betas must be either both floats or both Tensors (as torch.optim requires), got "
            f"betas={betas!r} ({kinds}); write them as floats, e.g. betas=(0.9, 0.999)"
        )


def check_torch_tensor_foreach(counterpart: str, values: Mapping[str, Any]) -> None:
    """torch.optim.Adam(W)'s refusal of a tensor ``lr`` or ``betas[0]`` with ``foreach=True``.

    torch refuses them (``capturable=False``) before it looks at the parameters; anyaccel's
    fused step could take them, but code written against torch is refused alike, in torch's
    words, where the installed torch refuses them.
    """
    if not _truthy_flag(values.get("foreach")) or _truthy_flag(values.get("capturable")):
        return
    betas = values.get("betas")
    first_beta = betas[0] if isinstance(betas, tuple | list) and betas else None
    for name, value in (("lr", values.get("lr")), ("betas[0]", first_beta)):
        if isinstance(value, torch.Tensor) and _torch_refuses_tensor_with_foreach(
            counterpart, name
        ):
            raise OptimizerValueError(
                f"{name} as a Tensor is not supported for capturable=False and foreach=True "
                f"(torch.optim.{counterpart} refuses {name}={value!r} with foreach=True, so "
                "anyaccel does too, though its fused step never uses foreach); pass "
                f"foreach=None (the default), or {name} as a float"
            )


@functools.cache
def _torch_refuses_tensor_with_foreach(counterpart: str, name: str) -> bool:
    """Whether the installed ``torch.optim.<counterpart>`` refuses tensor ``name`` with foreach."""
    optimizer_class = getattr(torch.optim, counterpart)
    probe = torch.zeros(1, requires_grad=True)
    given: dict[str, Any] = (
        {"lr": torch.tensor(1e-3)}
        if name == "lr"
        else {"betas": (torch.tensor(0.9), torch.tensor(0.999))}
    )
    try:
        optimizer_class([probe], foreach=True, **given)
    except ValueError as error:
        return "is not supported for capturable=False and foreach=True" in str(error)
    except (TypeError, RuntimeError):  # a torch that takes no tensor here at all
        return False
    return False


@functools.cache
def _torch_checks_beta_types() -> bool:
    """Whether the installed torch.optim.Adam refuses betas that mix floats and tensors."""
    try:
        torch.optim.Adam([torch.zeros(1, requires_grad=True)], betas=(0, 0.9))
    except ValueError:
        return True
    return False


def _truthy_flag(value: Any) -> bool:
    """Whether a flag's value (already checked or not) is set."""
    return isinstance(value, bool | int) and bool(value)


@functools.cache
def torch_group_defaults(counterpart: str) -> Mapping[str, Any]:
    """The group keys and defaults the installed torch's ``torch.optim.<counterpart>`` writes.

    They differ between torch versions (``decoupled_weight_decay`` is newer than 2.4, for one),
    so they are read from the installed torch rather than listed here.
    """
    optimizer_class = getattr(torch.optim, counterpart)
    probe = torch.zeros(1, requires_grad=True)
    return dict(optimizer_class([probe]).defaults)


def torch_keys_we_cannot_check(counterpart: str, rules: Mapping[str, Rule]) -> dict[str, Any]:
    """torch's group keys this rule book does not know, with torch's default for each.

    A checkpoint may carry them (a torch newer than this code); only torch's default value is
    safe to accept for them.
    """
    return {k: v for k, v in torch_group_defaults(counterpart).items() if k not in rules}


def with_torch_keys(defaults: dict[str, Any], counterpart: str | None) -> dict[str, Any]:
    """``defaults`` plus the group keys torch's counterpart writes that they lack (torch's values).

    So our param groups, and the state dicts we save, carry every key torch's optimizer reads.
    """
    if counterpart is None:
        return dict(defaults)
    return {**torch_group_defaults(counterpart), **defaults}
