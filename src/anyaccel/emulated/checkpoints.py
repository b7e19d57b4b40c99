"""Checkpoints saved on an emulated device, loaded where none is installed: say how to load them.

torch tags each saved storage with its device (``emu:0``, ``npu:1``) and, at load time, asks the
deserializers registered with ``torch.serialization.register_package`` in priority order; when
none knows the tag it raises a generic "don't know how to restore data location". This module
registers one more deserializer, after all of torch's (:data:`PRIORITY`), that claims only the
device types an emulated device goes by (``emu``, and the vendor types it stands in for:
``npu``, ``mlu``, ...) and raises :class:`~anyaccel.emulated.state.EmulatedDeviceError` naming
the setting that installs the device and ``map_location="cpu"``. Any other tag it leaves to
torch's own error.

``import anyaccel`` imports no torch, so the registration cannot happen there: the emulated
backend's probe makes it (:func:`register_checkpoint_hint`), which runs when anyaccel first
detects the accelerator on a machine without the hardware of a type probed before it. A process
that loads such a checkpoint without ever asking anyaccel for its accelerator gets torch's
message; calling :func:`register_checkpoint_hint` itself gets this one.
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any

from anyaccel.emulated.spec import DEFAULT_DEVICE_TYPE, EMULATED_ENV
from anyaccel.emulated.state import EmulatedDeviceError
from anyaccel.forksafe import ForkSafeLock
from anyaccel.probe import FORCE_ENV

__all__ = ["PRIORITY", "register_checkpoint_hint"]

#: After torch's own deserializers (10..26) and any a vendor registers near them.
PRIORITY = 1000

_LOCATION = re.compile(r"^([a-z][a-z0-9_]*)(?::\d+)?$")
_registered = False
_lock = ForkSafeLock()


def _is_emulated_type(device_type: str) -> bool:
    """Whether an emulated device goes by ``device_type``: ``emu``, or a vendor type anyaccel
    has a backend file for (the emulated device stands in for those; torch's own types never
    reach here: torch's deserializers claim them first)."""
    if device_type == DEFAULT_DEVICE_TYPE:
        return True
    return importlib.util.find_spec(f"anyaccel.backends.{device_type}") is not None


def _explain(storage: Any, location: str) -> None:
    """torch's deserializer hook: raise for a tag of an emulated device type, else ``None``."""
    import torch

    match = _LOCATION.match(location)
    if match is None:
        return None
    device_type = match.group(1)
    if device_type == torch._C._get_privateuse1_backend_name() or not _is_emulated_type(
        device_type
    ):
        return None  # installed here (torch restores it), or no type of ours: torch's error
    # enough devices for this tag's index (the checkpoint may name more)
    count = "N" if match.group(0) == device_type else str(int(location.split(":")[1]) + 1)
    vendor = (
        ""
        if device_type == DEFAULT_DEVICE_TYPE
        else f"; if it was saved on the vendor's {device_type} hardware, install its runtime"
    )
    raise EmulatedDeviceError(
        f"this checkpoint holds tensors saved on {location!r}, a device this process does not "
        f"have. If it was saved on anyaccel's emulated device, install that device before "
        f"loading: {FORCE_ENV}=emulated {EMULATED_ENV}={device_type}:{count} in the "
        f"environment, pytest --anyaccel-emulated={device_type}:{count}, or "
        f"anyaccel.testing.emulated.install({device_type!r}, {count}){vendor}. Or load it onto "
        "the CPU: torch.load(..., map_location='cpu')"
    )


def _tag(storage: Any) -> None:
    """Tags nothing: saving is torch's."""
    return None


def register_checkpoint_hint() -> None:
    """Register the deserializer that names the setting for an emulated device's checkpoint.

    Idempotent and cheap (one entry in torch's list); never initialises a device.
    """
    global _registered
    with _lock:
        if _registered:
            return
        import torch.serialization

        torch.serialization.register_package(PRIORITY, _tag, _explain)
        _registered = True
