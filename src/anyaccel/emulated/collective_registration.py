"""The emulated device's collective backend, registered with torch by name.

``register_collectives("npu", "hccl")`` (the emulated accelerator calls it when it installs the
device, with the name its data sheet gives: ``hccl`` for npu, ``emuccl`` for a type that stands
in for no vendor) registers the name with torch for that device type only, as a vendor's
runtime does, so ``init_process_group("hccl")`` and ``DDP(model.to("npu:0"), device_ids=[0])``
run unchanged. Registering is cheap: the c10d classes are built when the first group is made,
by ``anyaccel.emulated.collectives.create_backend``. That module is named here as a string: it
builds the backend over an ``anyaccel_shm`` group (``anyaccel.distributed``, the face layer),
while this registration runs when the accelerator (the backends layer) installs the device.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from anyaccel.emulated.state import EmulatedDeviceError
from anyaccel.forksafe import ForkSafeLock
from anyaccel.probe import resolve

__all__ = ["BACKEND_FACTORY", "register_collectives", "registered_collectives"]

logger = logging.getLogger(__name__)

#: Makes a rank's c10d ``Backend``: ``factory(device_type, name, store, rank, size, timeout)``.
BACKEND_FACTORY = "anyaccel.emulated.collectives:create_backend"
#: torch's own backend names: torch builds these itself, a plugin cannot take them.
TORCH_BACKENDS = frozenset({"gloo", "nccl", "mpi", "ucc", "xccl", "fake", "undefined"})

#: backend name -> the device type it was registered for, in this process.
_registered: dict[str, str] = {}
_lock = ForkSafeLock()


def registered_collectives() -> dict[str, str]:
    """The collective backends registered in this process: name -> device type."""
    with _lock:
        return dict(_registered)


def _creator(device_type: str, name: str) -> Callable[[Any, int, int, timedelta], Any]:
    """The factory torch calls on every rank of a group that uses ``name``."""

    def create(store: Any, rank: int, size: int, timeout: timedelta) -> Any:
        factory = resolve(BACKEND_FACTORY)
        return factory(device_type, name, store, rank, size, timeout)

    return create


def register_collectives(device_type: str, name: str) -> str:
    """Register collective backend ``name`` with torch for ``device_type`` tensors; returns it.

    Idempotent. Raises ``EmulatedDeviceError`` when torch has no ``torch.distributed``, when
    its ``Backend.register_backend`` takes no ``devices``, or when ``name`` is one of torch's
    own backends or is registered already by another device type or package.
    """
    import torch
    import torch.distributed as dist

    chosen = name.lower()
    if not dist.is_available():
        raise EmulatedDeviceError(
            f"torch {torch.__version__} was built without torch.distributed: the emulated "
            f"{device_type!r} device has no collectives here"
        )
    if chosen in TORCH_BACKENDS:
        raise EmulatedDeviceError(
            f"the emulated {device_type!r} device's collectives cannot be named {chosen!r}, one "
            "of torch's own backends: name them another way (e.g. 'emuccl')"
        )
    with _lock:
        taken_by = _registered.get(chosen)
        if taken_by == device_type:
            return chosen
        if taken_by is not None or chosen in dist.Backend.backend_list:
            owner = f"the emulated {taken_by!r} device" if taken_by else "another package"
            raise EmulatedDeviceError(
                f"the collective backend name {chosen!r} is registered with torch by {owner}; "
                f"the emulated {device_type!r} device needs a name of its own"
            )
        register = getattr(dist.Backend, "register_backend", None)
        if register is None or "devices" not in inspect.signature(register).parameters:
            raise EmulatedDeviceError(
                f"torch {torch.__version__} cannot register the {chosen!r} backend for one "
                "device type (Backend.register_backend(..., devices=) is missing): upgrade torch"
            )
        register(chosen, _creator(device_type, chosen), extended_api=False, devices=[device_type])
        _registered[chosen] = device_type
    logger.debug("registered collective backend %r for %r tensors", chosen, device_type)
    return chosen
