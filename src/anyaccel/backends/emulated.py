"""The emulated accelerator's documented door: ``anyaccel.backends.emulated:EmulatedAccelerator``.

It lives in :mod:`anyaccel.emulated.accelerator`, with the rest of the emulated device.
"""

from __future__ import annotations

from anyaccel.emulated.accelerator import (
    DEFAULT_COMMUNICATION_BACKEND,
    EmulatedAccelerator,
    probe,
    vendor_backend,
)

__all__ = ["DEFAULT_COMMUNICATION_BACKEND", "EmulatedAccelerator", "probe", "vendor_backend"]
