"""Emulated accelerators for tests: torch's PrivateUse1 device in host memory, under any name.

``install()`` makes ``<type>:0 .. <type>:N-1`` real devices in this process: every ATen op runs
on the CPU kernels over the device's memory, with per-device memory accounting, generators,
streams and events. Nothing is built or registered until it is called.
"""

from __future__ import annotations

from anyaccel.backends.emulated import EmulatedAccelerator
from anyaccel.ops.emulated.runtime import (
    MINIMUM_TORCH,
    EmulatedDeviceError,
    device_tensor_from_host,
    host_view,
)
from anyaccel.ops.emulated.settings import DEFAULT_DEVICE_TYPE, EMULATED_ENV, EmulatedSpec

__all__ = [
    "EMULATED_ENV",
    "MINIMUM_TORCH",
    "EmulatedAccelerator",
    "EmulatedDeviceError",
    "EmulatedSpec",
    "device_tensor_from_host",
    "host_view",
    "install",
]


def install(
    device_type: str = DEFAULT_DEVICE_TYPE,
    device_count: int = 2,
    memory_capacity: int | str | None = None,
) -> EmulatedAccelerator:
    """Install ``device_count`` emulated devices named ``device_type`` and return their accelerator.

    ``memory_capacity`` caps each device (bytes, or a size such as ``"2GiB"``); beyond it an
    allocation raises ``torch.OutOfMemoryError``. Idempotent for the same arguments. Raises
    ``ValueError`` for a bad argument and ``EmulatedDeviceError`` when torch is older than
    ``MINIMUM_TORCH``, when PrivateUse1 already belongs to another name in this process, or
    when this process installed other arguments.
    """
    from anyaccel.ops.emulated.settings import parse_capacity

    spec = EmulatedSpec(device_type, device_count, parse_capacity(memory_capacity))
    return EmulatedAccelerator(spec)
