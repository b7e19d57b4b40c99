"""The emulated device's state in this process (the loaded native core, the installed spec),
and its error type. Importing it loads nothing."""

from __future__ import annotations

from types import ModuleType

from anyaccel.errors import AcceleratorError
from anyaccel.ops.emulated.settings import EmulatedSpec

__all__ = ["EmulatedDeviceError", "installed_spec", "native", "set_installed", "set_native"]

_native: ModuleType | None = None
_installed: EmulatedSpec | None = None


def installed_spec() -> EmulatedSpec | None:
    """The spec this process installed, or ``None`` before ``install``."""
    return _installed


def set_installed(spec: EmulatedSpec) -> None:
    """Record the spec ``install`` made real."""
    global _installed
    _installed = spec


class EmulatedDeviceError(AcceleratorError):
    """The emulated device cannot be installed here, or was installed differently."""


def set_native(module: ModuleType) -> None:
    """Record the native core ``install`` loaded."""
    global _native
    _native = module


def native() -> ModuleType:
    """The loaded native core; ``EmulatedDeviceError`` before ``install``."""
    if _native is None:
        raise EmulatedDeviceError(
            "the emulated device is not installed in this process: call "
            "anyaccel.testing.emulated.install() (or set DS_ACCELERATOR=emulated) first"
        )
    return _native
