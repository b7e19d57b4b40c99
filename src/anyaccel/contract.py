"""Whether an object satisfies the accelerator contract, read off :class:`Accelerator` itself.

The members checked are the ABC's public methods and properties (plus ``_name``), so a method
added to the ABC is checked from that day on. Objects written for DeepSpeed, which do not
subclass :class:`Accelerator`, are accepted when they have DeepSpeed's members; the members
anyaccel added since (:data:`ANYACCEL_ADDITIONS`) are bound from the ABC's defaults when absent.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from anyaccel.abstract import Accelerator
from anyaccel.errors import InvalidAcceleratorError
from anyaccel.instance_defaults import settle
from anyaccel.probe import FORCE_ENV

__all__ = [
    "ACCELERATOR_NAME",
    "ANYACCEL_ADDITIONS",
    "CONTRACT_MEMBERS",
    "OPTIONAL_MEMBERS",
    "REQUIRED_MEMBERS",
    "accelerator_argument",
    "check_accelerator",
    "missing_members",
    "signature_problems",
    "validated",
]

#: Contract members anyaccel added after DeepSpeed's abstract accelerator; objects written for
#: DeepSpeed may lack them and get the ABC's default.
ANYACCEL_ADDITIONS: frozenset[str] = frozenset(
    {
        "prefer_triton_grouped_mm", "is_fp64_supported", "unpin_memory", "pin_empty",
        "pin_empty_like", "pin_memory_alignment", "register_host_memory",
        "unregister_host_memory", "amp", "is_current_stream_capturing", "pin_memory_applies",
        "memory_measure",
    }
)  # fmt: skip


def _abc_members() -> dict[str, Any]:
    """The ABC's public methods and properties, in definition order (bases first)."""
    members: dict[str, Any] = {}
    for klass in reversed(Accelerator.__mro__):
        if klass is object:
            continue
        for name, value in vars(klass).items():
            if name.startswith("_"):
                continue
            if inspect.isfunction(value) or isinstance(value, property):
                members[name] = value
    return members


_ABC_MEMBERS = _abc_members()

#: Every member of the contract: the name, then the ABC's public methods and properties.
CONTRACT_MEMBERS: tuple[str, ...] = ("_name", *_ABC_MEMBERS)
#: Members every accelerator object must have (DeepSpeed's contract).
REQUIRED_MEMBERS: tuple[str, ...] = tuple(
    name for name in CONTRACT_MEMBERS if name not in ANYACCEL_ADDITIONS
)
#: Newer members anyaccel fills in with its defaults on objects that lack them.
OPTIONAL_MEMBERS: tuple[str, ...] = tuple(
    name for name in CONTRACT_MEMBERS if name in ANYACCEL_ADDITIONS
)
#: Private helpers the ABC's defaults call (bound with them onto duck-typed objects).
DEFAULT_HELPERS: tuple[str, ...] = tuple(
    name
    for name, value in vars(Accelerator).items()
    if name.startswith("_") and not name.startswith("__") and inspect.isfunction(value)
)


def missing_members(candidate: object) -> list[str]:
    """The required members ``candidate`` lacks (properties are looked up, not evaluated)."""
    cls = type(candidate)
    missing = []
    for name in REQUIRED_MEMBERS:
        if isinstance(_ABC_MEMBERS.get(name), property):
            present = hasattr(cls, name) or name in getattr(candidate, "__dict__", {})
        else:
            present = hasattr(candidate, name)
        if not present:
            missing.append(name)
    return missing


def _plain(signature: inspect.Signature, *, drop_self: bool = False) -> str:
    """``signature`` without annotations (and without ``self``), as a call shape."""
    parameters = list(signature.parameters.values())[1 if drop_self else 0 :]
    plain = [p.replace(annotation=p.empty) for p in parameters]
    return str(signature.replace(parameters=plain, return_annotation=signature.empty))


def _signature_problem(candidate: object, name: str) -> str | None:
    reference = _ABC_MEMBERS[name]
    if isinstance(reference, property):
        declared = inspect.getattr_static(candidate, name, None)
        if isinstance(declared, property) or callable(declared):
            return None
        return f"{name} is a {type(declared).__name__}, not a property or callable"
    member = getattr(candidate, name)
    if not callable(member):
        return f"{name} is a {type(member).__name__} ({member!r:.40}), not a method"
    try:
        theirs = inspect.signature(member)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to compare
        return None
    ours = list(inspect.signature(reference).parameters.values())[1:]
    required = [
        p
        for p in ours
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    keywords = {p.name: None for p in ours if p.default is p.empty and p.kind is p.KEYWORD_ONLY}
    try:
        theirs.bind(*[None] * len(required), **keywords)
    except TypeError:
        shape = _plain(inspect.signature(reference), drop_self=True)
        return f"{name}{_plain(theirs)} cannot be called as the contract's {name}{shape}"
    return None


def signature_problems(candidate: object) -> list[str]:
    """Contract members of ``candidate`` that are not callable the way the ABC's are."""
    problems = []
    for name in CONTRACT_MEMBERS:
        absent = not hasattr(type(candidate), name) and not hasattr(candidate, name)
        if name == "_name" or absent:
            continue
        problem = _signature_problem(candidate, name)
        if problem is not None:
            problems.append(problem)
    return problems


#: What an accelerator's ``_name`` and a plugin's entry-point name may be: a token that
#: ``DS_ACCELERATOR`` holds and a shell passes unquoted, such as ``'cuda'`` or ``'toy_hw'``
#: (torch's device types are the ones without ``.`` and ``-``).
ACCELERATOR_NAME = re.compile(r"[a-z][a-z0-9_.\-]*")


def _suggested_name(name: str) -> str:
    """``name`` made a usable accelerator name, for the error message ('Toy HW' -> 'toy_hw')."""
    token = re.sub(r"[^a-z0-9_]+", "_", name.strip().lower()).strip("_")
    return token if token[:1].isalpha() else f"dev_{token}".rstrip("_")


def accelerator_argument(value: object, call: str) -> Accelerator:
    """``value`` as an accelerator argument of ``call``, or ``InvalidAcceleratorError`` naming it.

    Accepts an :class:`Accelerator` or an object with every member the contract requires
    (an accelerator written for DeepSpeed); changes nothing. A device name such as ``"cpu"``
    is refused with the way to choose a backend by name.
    """
    if isinstance(value, Accelerator):
        return value
    if isinstance(value, type):
        raise InvalidAcceleratorError(
            f"{call} takes an accelerator instance, got the class {value.__qualname__}; "
            f"call it: {value.__qualname__}()"
        )
    if isinstance(value, str):
        raise InvalidAcceleratorError(_string_refusal(value, call))
    missing = missing_members(value)
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        shown = ", ".join(missing[:3]) + more
        raise InvalidAcceleratorError(
            f"{call} takes an accelerator object such as anyaccel.get_accelerator(), not "
            f"{value!r} (type {type(value).__qualname__}, which lacks {shown})"
        )
    return value  # type: ignore[return-value]  # duck-typed: every required member is there


def _string_refusal(value: str, call: str) -> str:
    """Why a device name is no accelerator, and how to choose a backend by name."""
    return (
        f"{call} takes an accelerator object, not the string {value!r}: pass "
        "anyaccel.get_accelerator() (to choose the backend by name, set "
        f"{FORCE_ENV}={value.partition(':')[0] or 'cpu'} before the first get_accelerator())"
    )


def check_accelerator(candidate: object, *, check_signatures: bool = True) -> None:
    """Raise ``InvalidAcceleratorError`` naming what keeps ``candidate`` from being accepted.

    The checks of :func:`validated`, without its changes: nothing is set on ``candidate``
    and its class is not registered, so a caller can refuse for other reasons afterwards.
    """
    if isinstance(candidate, type):
        raise InvalidAcceleratorError(
            f"set_accelerator() needs an accelerator instance, got the class "
            f"{candidate.__qualname__}; call it: set_accelerator({candidate.__qualname__}())"
        )
    if isinstance(candidate, str):
        raise InvalidAcceleratorError(_string_refusal(candidate, "set_accelerator()"))
    missing = missing_members(candidate)
    if missing:
        raise InvalidAcceleratorError(
            f"{type(candidate).__qualname__} object is not an accelerator: it lacks "
            f"{', '.join(missing)}. Subclass anyaccel.Accelerator (or "
            "anyaccel.backends.torch_module.TorchModuleAccelerator) and implement them."
        )
    name = getattr(candidate, "_name", None)
    if not isinstance(name, str) or not name:
        raise InvalidAcceleratorError(
            f"{type(candidate).__qualname__}._name is {name!r}; an accelerator needs a non-empty "
            "string name such as 'cuda' (set it as a class attribute or in __init__)"
        )
    if not ACCELERATOR_NAME.fullmatch(name):
        raise InvalidAcceleratorError(
            f"{type(candidate).__qualname__}._name is {name!r}, which is not a device-type name: "
            "use lowercase letters, digits, '_', '.' or '-', starting with a letter, as "
            f"{FORCE_ENV} values are (e.g. {_suggested_name(name)!r})"
        )
    if not isinstance(candidate, Accelerator) and check_signatures:
        problems = signature_problems(candidate)
        if problems:
            raise InvalidAcceleratorError(
                f"{type(candidate).__qualname__} object does not satisfy the accelerator "
                f"contract: {'; '.join(problems)}. Give each the signature anyaccel.Accelerator "
                "declares (or subclass it)."
            )


def validated(candidate: object, *, check_signatures: bool = True) -> Accelerator:
    """``candidate`` as an accelerator, or ``InvalidAcceleratorError`` naming what is wrong.

    Objects that satisfy the contract without subclassing :class:`Accelerator` (such as an
    accelerator written for DeepSpeed) are accepted once every member they have is callable
    with the ABC's required arguments; the newer optional members they lack are bound from
    anyaccel's defaults. ``check_signatures=False`` skips the signature check, for the
    built-in path to intel_extension_for_deepspeed, whose ``initial_seed`` wants a seed.
    Everything is checked (:func:`check_accelerator`) before anything is adopted.
    """
    check_accelerator(candidate, check_signatures=check_signatures)
    if not isinstance(candidate, Accelerator):
        for member in OPTIONAL_MEMBERS + DEFAULT_HELPERS:
            if not hasattr(candidate, member):
                default = getattr(Accelerator, member)
                setattr(candidate, member, default.__get__(candidate, type(candidate)))
        Accelerator.register(type(candidate))
    if not isinstance(candidate, Accelerator):  # pragma: no cover - register() makes it one
        raise InvalidAcceleratorError(f"{type(candidate).__qualname__} could not be registered")
    settle(candidate)  # base state a skipped super().__init__() left unmade, made now
    return candidate
