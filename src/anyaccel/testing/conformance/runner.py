"""Running the checks in this process: load the target, run each check, collect the report."""

from __future__ import annotations

import importlib
import inspect
import time
from collections.abc import Iterable, Sequence
from typing import Any

from anyaccel.abstract import Accelerator
from anyaccel.contract import REQUIRED_MEMBERS, missing_members
from anyaccel.errors import AnyaccelError
from anyaccel.instance_defaults import settle
from anyaccel.testing.conformance.checks import CHECKS, DEVICE_CHECKS, SkipCheck, no_device_reason
from anyaccel.testing.conformance.report import (
    CheckResult,
    ConformanceReport,
    describe_exception,
    safe_repr,
)

__all__ = ["ConformanceError", "load_accelerator", "prepare", "run_check", "run_conformance"]


class ConformanceError(AnyaccelError, ValueError):
    """The thing to check could not be found or created."""


def prepare(compile_backend: bool = True) -> None:
    """Import the torch modules the checks use; call it before a simulated runtime patches torch.

    ``compile_backend=False`` skips ``torch._dynamo`` (seconds to import), which only the
    ``compile_backend`` check needs.
    """
    import torch.utils.cpp_extension

    if compile_backend:
        import torch._dynamo  # noqa: F401


def load_accelerator(target: object) -> tuple[Any, str]:
    """An accelerator instance from an instance, a class, a factory or ``"module:Class"``.

    Raises ``ConformanceError`` for a malformed reference, and when importing the module or
    creating the accelerator raises anything (even ``SystemExit``), with its type and message.
    """
    label = target if isinstance(target, str) else getattr(target, "__qualname__", None)
    if label is None:
        label = safe_repr(target)
    if isinstance(target, str):
        module_name, sep, attribute = target.partition(":")
        if not sep or not module_name or not attribute:
            raise ConformanceError(
                f"{target!r} is not of the form 'package.module:Class'; "
                "e.g. anyaccel.backends.cpu:CpuAccelerator"
            )
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise ConformanceError(
                f"cannot import {module_name!r} from {target!r}: {error}"
            ) from None
        except (Exception, SystemExit) as error:
            raise ConformanceError(
                describe_exception(error, f"importing {module_name!r}")
            ) from error
        if not hasattr(module, attribute):
            raise ConformanceError(f"module {module_name!r} has no attribute {attribute!r}")
        target = getattr(module, attribute)
    made = inspect.isclass(target) or (callable(target) and not hasattr(target, "_name"))
    if made:
        try:
            target = target()  # type: ignore[operator]  # a class or a factory: callable
        except (Exception, SystemExit) as error:
            raise ConformanceError(
                describe_exception(error, f"creating {label}") + "; the kit needs an "
                "accelerator that can be created here (use a simulated runtime without hardware)"
            ) from error
    _refuse_a_non_accelerator(target, str(label), made)
    try:  # base state a skipped super().__init__() left unmade: made now
        settle(target)
    except (Exception, SystemExit) as error:
        raise ConformanceError(describe_exception(error, f"handing over {label}")) from error
    return target, str(label)


def _refuse_a_non_accelerator(value: object, label: str, made: bool) -> None:
    """``ConformanceError`` naming ``value`` when it has none of the contract's members.

    Something that tries to be an accelerator (an ``Accelerator``, or an object with any
    contract member, such as a DeepSpeed-style class in progress) is left to the checks, which
    name what it lacks; a string, a module or a dict would fail every check with the same
    ``AttributeError``, so the target is refused once, saying what it is and what is expected.
    """
    if isinstance(value, Accelerator):
        return
    try:
        lacks_all = len(missing_members(value)) == len(REQUIRED_MEMBERS)
    except Exception:  # an attribute lookup that raises: the checks report it
        return
    if not lacks_all:
        return
    shown = f"{safe_repr(value)[:60]} (type {type(value).__qualname__})"
    what = f"{label}() returned {shown}" if made else f"{label} is {shown}"
    raise ConformanceError(
        f"{what}, not an accelerator (it has none of the contract's members, such as _name "
        "and device_name). The target must be an anyaccel.Accelerator subclass, a factory "
        "returning an accelerator, or an accelerator object, given as 'package.module:Class' "
        "(e.g. anyaccel.backends.cpu:CpuAccelerator)"
    )


def run_conformance(target: object, checks: Iterable[str] | None = None) -> ConformanceReport:
    """Run ``checks`` (default: all of :data:`CHECKS`) against ``target`` in this process.

    An exception from the target fails its check; a crash, ``os._exit`` or a hang takes this
    process with it: use ``anyaccel.testing.isolation.run_isolated`` for code still in progress.
    """
    accelerator, label = load_accelerator(target)
    selected: Sequence[str] = list(CHECKS) if checks is None else list(checks)
    unknown = [name for name in selected if name not in CHECKS]
    if unknown:
        raise ConformanceError(
            f"unknown check(s) {', '.join(unknown)}; choose from {', '.join(CHECKS)}"
        )
    results = [run_check(accelerator, name) for name in selected]
    try:
        name = str(getattr(accelerator, "_name", "?"))
    except Exception as error:
        name = f"? (_name raised {type(error).__name__})"
    return ConformanceReport(label, name, tuple(results))


def run_check(accelerator: Any, name: str) -> CheckResult:
    """Run the check called ``name``; an unexpected exception is a failure, not a crash."""
    start = time.perf_counter()
    if name in DEVICE_CHECKS:
        reason = no_device_reason(accelerator)
        if reason is not None:
            return CheckResult(name, "skipped", (reason,), time.perf_counter() - start)
    try:
        messages = CHECKS[name](accelerator)
    except SkipCheck as skip:
        return CheckResult(name, "skipped", (str(skip),), time.perf_counter() - start)
    except (Exception, SystemExit) as error:  # sys.exit in the target fails the check, too
        stopped = (
            f"the target called sys.exit({error.code!r})"
            if isinstance(error, SystemExit)
            else f"{type(error).__name__}: {error}"
        )
        messages = [f"the check stopped: {stopped}"]
    status = "failed" if messages else "passed"
    return CheckResult(name, status, tuple(messages), time.perf_counter() - start)
