"""Emulated accelerators for tests: torch's PrivateUse1 device in host memory, under any name.

``install()`` makes ``<type>:0 .. <type>:N-1`` real devices in this process: every ATen op runs
on the CPU kernels over the device's memory, with per-device memory accounting, generators,
streams and events. Nothing is built or registered until it is called. The device itself lives
in :mod:`anyaccel.emulated`; this is its documented door.
"""

from __future__ import annotations

from anyaccel.emulated.accelerator import EmulatedAccelerator, install
from anyaccel.emulated.runtime import (
    CPU_OPS_ENV,
    allow_cpu_kernels,
    allowed_cpu_kernels,
    device_tensor_from_host,
    host_view,
)
from anyaccel.emulated.spec import EMULATED_ENV, EmulatedSpec
from anyaccel.emulated.state import MINIMUM_TORCH, EmulatedDeviceError

__all__ = [
    "CPU_OPS_ENV",
    "EMULATED_ENV",
    "MINIMUM_TORCH",
    "EmulatedAccelerator",
    "EmulatedDeviceError",
    "EmulatedSpec",
    "allow_cpu_kernels",
    "allowed_cpu_kernels",
    "device_tensor_from_host",
    "host_view",
    "install",
]
