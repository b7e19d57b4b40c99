"""The emulated accelerator's collectives: a ``torch.distributed`` backend for its device type.

``register_collectives("npu")`` registers ``hccl`` with torch for ``npu`` tensors (the vendor's
name where the emulation stands in for a vendor's device: ``cncl`` for mlu, ``tccl`` for sdaa,
``mccl`` for musa, ...; ``emuccl`` otherwise), so ``init_process_group("hccl")`` and
``DDP(model.to("npu:0"), device_ids=[0])`` run unchanged. The device's memory is host memory:
the backend (a c10d ``Backend``, ``HostViewBackendBuilder``) runs each collective on CPU views of
the device tensors through an ``anyaccel_shm`` group (shared-memory kernels, gloo for what they
do not run), so the results are gloo's. Like the real backend it takes the device's tensors
only; a CPU tensor is refused by name (``"cpu:gloo,npu:hccl"`` gives the group both).
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch

from anyaccel.distributed.errors import DistributedSetupError
from anyaccel.forksafe import ForkSafeLock

__all__ = [
    "DEFAULT_BACKEND_NAME",
    "collective_backend_name",
    "create_backend",
    "register_collectives",
    "registered_collectives",
]

logger = logging.getLogger(__name__)

#: The backend name of an emulated device that stands in for no vendor's.
DEFAULT_BACKEND_NAME = "emuccl"
#: torch's own backend names: a plugin cannot take them (torch builds these itself).
_TORCH_BACKENDS = frozenset({"gloo", "nccl", "mpi", "ucc", "xccl", "fake", "undefined"})

#: backend name -> the device type it was registered for, in this process.
_registered: dict[str, str] = {}
_lock = ForkSafeLock()


def collective_backend_name(device_type: str) -> str:
    """The backend name for ``device_type``: its vendor's (``hccl`` for npu), else ``emuccl``.

    The vendor's name is the one its anyaccel backend declares (``_communication_backend_name``
    of the built-in accelerator class named ``device_type``); one torch builds itself (nccl,
    gloo) cannot be a plugin's, so such a device gets ``emuccl`` too.
    """
    from anyaccel.registry import BUILTIN_CANDIDATES

    for candidate in BUILTIN_CANDIDATES:
        if candidate.name != device_type or not isinstance(candidate.accelerator, str):
            continue
        module_name, _, class_name = candidate.accelerator.partition(":")
        accelerator = getattr(importlib.import_module(module_name), class_name)
        name = vars(accelerator).get("_communication_backend_name")
        if isinstance(name, str) and name.lower() not in _TORCH_BACKENDS:
            return name.lower()
    return DEFAULT_BACKEND_NAME


def registered_collectives() -> dict[str, str]:
    """The backends registered in this process: name -> device type."""
    with _lock:
        return dict(_registered)


def _backend_module() -> Any:
    """The compiled ``HostViewBackendBuilder`` module (built on first use)."""
    from anyaccel.ops.cpu.host_view_backend import HostViewBackendBuilder

    return HostViewBackendBuilder().load()


def _host_backend(store: Any, rank: int, size: int, timeout: timedelta) -> Any:
    """The CPU ``Backend`` that runs the collectives: an ``anyaccel_shm`` group's.

    Its shared-memory kernels where the ranks share a node, its gloo group for the rest
    (and for every collective when they do not).
    """
    from anyaccel.distributed.shm.backend import ShmProcessGroup
    from anyaccel.ops.cpu.shm_backend import ShmBackendBuilder

    group = ShmProcessGroup(store, rank, size, timeout)
    return ShmBackendBuilder().load().ShmBackend(rank, size, group, group.gloo)


def create_backend(
    device_type: str, name: str, store: Any, rank: int, size: int, timeout: timedelta
) -> Any:
    """The c10d ``Backend`` for ``device_type``'s tensors on one rank of a new group.

    Raises ``DistributedSetupError`` when anyaccel's c10d classes cannot be built here.
    """
    from anyaccel.ops.errors import OpError

    try:
        module = _backend_module()
        host = _host_backend(store, rank, size, timeout)
    except OpError as exc:
        raise DistributedSetupError(
            f"the {name!r} backend of the emulated {device_type!r} device needs anyaccel's "
            f"c10d backend classes, which could not be built here: {exc}. Install a C++ "
            "compiler and ninja (`anyaccel ops --build HostViewBackendBuilder "
            "ShmBackendBuilder` shows the build)"
        ) from exc
    return module.HostViewBackend(rank, size, device_type, name, host)


def _creator(device_type: str, name: str) -> Callable[[Any, int, int, timedelta], Any]:
    """The factory torch calls on every rank of a group that uses ``name``."""

    def create(store: Any, rank: int, size: int, timeout: timedelta) -> Any:
        return create_backend(device_type, name, store, rank, size, timeout)

    return create


def register_collectives(device_type: str, name: str | None = None) -> str:
    """Register the emulated ``device_type``'s collective backend with torch; returns its name.

    ``name`` defaults to :func:`collective_backend_name`. Idempotent, and cheap: nothing is
    built until a group is made. Raises ``DistributedSetupError`` when torch has no
    ``torch.distributed``, when its ``Backend.register_backend`` takes no ``devices`` (before
    2.1), or when the name is torch's own or already registered for another device type.
    """
    import torch.distributed as dist

    chosen = (name or collective_backend_name(device_type)).lower()
    if not dist.is_available():
        raise DistributedSetupError(
            f"torch {torch.__version__} was built without torch.distributed: the emulated "
            f"{device_type!r} device has no collectives here"
        )
    if chosen in _TORCH_BACKENDS:
        raise DistributedSetupError(
            f"{chosen!r} is one of torch's own backends and cannot be registered for the "
            f"emulated {device_type!r} device; pass another name (e.g. {DEFAULT_BACKEND_NAME!r})"
        )
    with _lock:
        taken_by = _registered.get(chosen)
        if taken_by == device_type:
            return chosen
        plugins = getattr(dist.Backend, "_plugins", {})
        if taken_by is not None or chosen.upper() in plugins:
            owner = f"the emulated {taken_by!r} device" if taken_by else "another package"
            raise DistributedSetupError(
                f"the collective backend name {chosen!r} is registered with torch by {owner}; "
                f"the emulated {device_type!r} device needs a name of its own: pass name= "
                f"(e.g. {DEFAULT_BACKEND_NAME!r})"
            )
        register = getattr(dist.Backend, "register_backend", None)
        if register is None or "devices" not in inspect.signature(register).parameters:
            raise DistributedSetupError(
                f"torch {torch.__version__} cannot register the {chosen!r} backend for one "
                "device type (Backend.register_backend(..., devices=) is missing): upgrade "
                "torch"
            )
        register(chosen, _creator(device_type, chosen), extended_api=False, devices=[device_type])
        _registered[chosen] = device_type
    logger.debug("registered collective backend %r for %r tensors", chosen, device_type)
    return chosen
