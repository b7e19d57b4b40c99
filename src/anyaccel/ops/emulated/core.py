"""The loaded native core of the emulated device (one per process), and its error type."""

from __future__ import annotations

from types import ModuleType

from anyaccel.errors import AcceleratorError

__all__ = ["EmulatedDeviceError", "native", "set_native"]

_native: ModuleType | None = None


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
