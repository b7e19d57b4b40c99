"""The emulated accelerator's collective backend: a c10d ``Backend`` over its host memory.

torch calls :func:`create_backend` (through ``collective_registration``, which registers the
name) on every rank of a group that uses the emulated device's backend (``hccl``
where it stands in for npu, ``emuccl`` otherwise). The ``Backend`` (``HostViewBackendBuilder``)
runs each collective on CPU views of the device tensors through an ``anyaccel_shm`` group:
shared-memory kernels for what they run, gloo for the rest, so results are gloo's. Like the real
backend it takes the device's tensors only, and names a CPU tensor handed to it; and, as NCCL
does, it refuses two ranks of one node on one device at the group's first collective.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from anyaccel.distributed.errors import DistributedSetupError

__all__ = ["create_backend"]


def _backend_module() -> Any:
    """The compiled ``HostViewBackendBuilder`` module (built on first use)."""
    from anyaccel.emulated.native_builders import HostViewBackendBuilder

    return HostViewBackendBuilder().load()


def _host_backend(store: Any, rank: int, size: int, timeout: timedelta, label: str) -> Any:
    """The CPU ``Backend`` that runs the collectives: an ``anyaccel_shm`` group's.

    Its shared-memory kernels where the ranks share a node, its gloo group for the rest (and
    for every collective when they do not). Its errors name ``label``, the user's backend.
    """
    from anyaccel.distributed.shm.backend import ShmProcessGroup
    from anyaccel.ops.cpu.shm_c10d_backend import ShmC10dBackendBuilder

    group = ShmProcessGroup(store, rank, size, timeout, label=label)
    return ShmC10dBackendBuilder().load().ShmBackend(rank, size, group, group.gloo)


def create_backend(
    device_type: str, name: str, store: Any, rank: int, size: int, timeout: timedelta
) -> Any:
    """The c10d ``Backend`` for ``device_type``'s tensors on one rank of a new group.

    Raises ``DistributedSetupError`` when anyaccel's c10d classes cannot be built here.
    """
    from anyaccel.ops.errors import OpError

    try:
        module = _backend_module()
        label = f"{name} (the emulated {device_type} device's backend, on anyaccel_shm)"
        host = _host_backend(store, rank, size, timeout, label)
    except OpError as exc:
        raise DistributedSetupError(
            f"the {name!r} backend of the emulated {device_type!r} device needs anyaccel's "
            f"c10d backend classes, which could not be built here: {exc}. Install a C++ "
            "compiler and ninja (`anyaccel ops --build HostViewBackendBuilder "
            "ShmC10dBackendBuilder` shows the build)"
        ) from exc
    from anyaccel.distributed.shm.group import node_identity

    # the node tells the backend which ranks share devices (two ranks on one device: refused)
    return module.HostViewBackend(rank, size, device_type, name, host, node_identity())
