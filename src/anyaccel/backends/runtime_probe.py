"""Probing a vendor runtime package without letting its import take the process down.

Vendor packages fail in unfriendly ways: torch_npu raises ``ImportError`` (older releases
print a hint and call ``sys.exit()``) when the Ascend CANN libraries are missing, and it
sets ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` before failing, which would leak into every child
process. ``import_runtime`` turns all of that into one ``RuntimeImportError`` and undoes the
leftovers; ``probe_device_runtime`` is the probe most vendor backends need, as data.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from anyaccel.errors import AnyaccelError
from anyaccel.probe import FrozenRecord, ProbeOutcome, package_absent
from anyaccel.settings import AUTOLOAD_ENV

if TYPE_CHECKING:
    from anyaccel.backends.torch_module import TorchModuleAccelerator

__all__ = [
    "RuntimeCheck",
    "RuntimeImportError",
    "count_devices",
    "import_runtime",
    "probe_device_runtime",
    "probe_runtime_of",
]

#: Turns an import failure's text into (what went wrong, what to do), or ``None`` if unknown.
Diagnosis = Callable[[str], "tuple[str, str] | None"]


class RuntimeImportError(AnyaccelError, ImportError):
    """A vendor runtime package is installed but importing it failed (or exited)."""


class RuntimeCheck(FrozenRecord):
    """How a user checks a vendor's runtime when it fails: its status command and its stack.

    A :class:`~anyaccel.probe.FrozenRecord`: neither a dataclass nor a ``NamedTuple`` compiles
    methods at import, on every first detection's path.
    """

    _fields = ("status", "stack")
    status: str
    """The vendor's own status check, e.g. "`npu-smi info` lists the NPUs"."""
    stack: str
    """What must match for the runtime to work, e.g. "the Ascend driver and CANN toolkit"."""

    def __init__(self, status: str, stack: str) -> None:
        self._set_fields(status, stack)

    def remedy(self, package: str) -> str:
        """What to do when ``package``'s runtime raises: the vendor's check, not anyaccel's."""
        return (
            f"The vendor runtime itself failed (not anyaccel): check that {self.status}, and "
            f"that {self.stack} are installed and match the {package} release."
        )


def count_devices(
    device_count: Callable[[], Any], what: str, package: str, check: RuntimeCheck
) -> int | ProbeOutcome:
    """``device_count()`` as an int, or a ``broken`` outcome quoting the runtime's exception."""
    try:
        return int(device_count())
    except Exception as error:  # the vendor's runtime failed: say so, and how to check it
        return ProbeOutcome.broken(
            f"{what}.device_count() raised {type(error).__name__}: {error}",
            check.remedy(package),
        )


def _top_level(package: str) -> str:
    return package.partition(".")[0]


def import_runtime(package: str) -> ModuleType:
    """Import ``package``; on failure raise ``RuntimeImportError`` and undo its side effects.

    ``SystemExit`` from the package becomes an error carrying what it printed, the value of
    ``TORCH_DEVICE_BACKEND_AUTOLOAD`` is restored, and half-imported submodules are dropped so
    that a later import reports the same failure instead of a confusing one.
    """
    saved_autoload = os.environ.get(AUTOLOAD_ENV)
    before = set(sys.modules)
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            module = importlib.import_module(package)
    except (Exception, SystemExit) as error:
        _undo_failed_import(package, before, saved_autoload)
        printed = " ".join(captured.getvalue().split())
        if isinstance(error, SystemExit):
            message = f"import {package} called sys.exit({error.code!r})"
        else:
            message = f"{type(error).__name__}: {error}"
        if printed:
            message = f"{message} (it printed: {printed[:400]})"
        raise RuntimeImportError(message) from error
    output = captured.getvalue()
    if output:
        sys.stderr.write(output)
    return module


def _undo_failed_import(package: str, before: set[str], saved_autoload: str | None) -> None:
    if saved_autoload is None:
        os.environ.pop(AUTOLOAD_ENV, None)
    else:
        os.environ[AUTOLOAD_ENV] = saved_autoload
    root = _top_level(package)
    for name in set(sys.modules) - before:
        if name == root or name.startswith(root + "."):
            sys.modules.pop(name, None)


def _not_found_error(error: BaseException, package: str) -> bool:
    """Whether ``error`` only says that ``package`` (or a parent of it) does not exist."""
    cause = error.__cause__
    if not isinstance(cause, ModuleNotFoundError) or cause.name is None:
        return False
    return package == cause.name or package.startswith(cause.name + ".")


def visibility_note(env_name: str) -> str:
    """`` with VAR='value'`` when the visible-devices variable is set (it may hide devices)."""
    value = os.environ.get(env_name)
    return f" with {env_name}={value!r}" if value is not None else ""


def probe_device_runtime(
    *,
    package: str,
    device_module: Callable[[ModuleType], Any],
    vendor: str,
    install_hint: str,
    check: RuntimeCheck,
    visible_env: str | None = None,
    diagnose: Diagnosis | None = None,
) -> ProbeOutcome:
    """Find ``package`` without importing it, import it safely, then count devices.

    ``device_module`` maps the imported package to its ``torch.cuda``-shaped module (only
    ``device_count()`` is called, which no vendor runtime makes create a device context). If
    that raises, the outcome quotes the runtime's exception and ``check``'s remedy.
    """
    absent = package_absent(package)
    if absent is not None:
        return ProbeOutcome.not_installed(absent, install_hint)
    try:
        imported = import_runtime(package)
    except RuntimeImportError as error:
        if _not_found_error(error, package):
            return ProbeOutcome.not_installed(f"{package} is not installed", install_hint)
        text = str(error)
        known = diagnose(text) if diagnose is not None else None
        if known is not None:
            what, remedy = known
            return ProbeOutcome.broken(f"{what} ({text})", remedy)
        return ProbeOutcome.broken(
            f"{package} is installed but importing it failed: {text}",
            f"Fix or reinstall the {vendor} runtime so that `python -c 'import {package}'` works.",
        )
    module = device_module(imported)
    if module is None:
        return ProbeOutcome.broken(
            f"{package} imported but provides no device module",
            f"Install a {package} release that matches torch {_torch_version()}.",
        )
    count = count_devices(module.device_count, f"{package} device module", package, check)
    if isinstance(count, ProbeOutcome):
        return count
    if count <= 0:
        where = visibility_note(visible_env) if visible_env is not None else ""
        return ProbeOutcome.no_device(
            f"{package} imports but sees no {vendor} device{where}",
            f"Check that the {vendor} driver is loaded and sees the device"
            + (f", and that {visible_env} does not hide it." if visible_env else "."),
        )
    return ProbeOutcome.found(f"{count} {vendor} device(s) through {package}", count)


def probe_runtime_of(
    accelerator: type[TorchModuleAccelerator],
    *,
    vendor: str,
    install_hint: str,
    check: RuntimeCheck,
    diagnose: Diagnosis | None = None,
) -> ProbeOutcome:
    """:func:`probe_device_runtime` for a backend class, with the facts its data sheet states.

    The package (``runtime_package``), the device module (``torch.<device_module_name>``) and
    the visible-devices variable (the first of ``visible_devices_env_names``) come from the
    class, so a vendor module states each of them once; ``{package}`` in ``install_hint``
    names the package.
    """
    package = accelerator.runtime_package
    if not package:
        raise TypeError(
            f"{accelerator.__qualname__} names no runtime_package; set it, or probe with "
            "probe_device_runtime(package=...)"
        )
    module_name = accelerator.device_module_name or accelerator._name
    envs = accelerator.visible_devices_env_names

    def device_module(_package: ModuleType) -> Any:
        import torch

        return getattr(torch, module_name, None)

    return probe_device_runtime(
        package=package,
        device_module=device_module,
        vendor=vendor,
        install_hint=install_hint.format(package=package),
        check=check,
        visible_env=envs[0] if envs else None,
        diagnose=diagnose,
    )


def _torch_version() -> str:
    import torch

    return str(torch.__version__)
