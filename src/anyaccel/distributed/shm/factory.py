"""The factory ``torch.distributed`` calls for each new ``anyaccel_shm`` group
(:func:`create_group`), and the way back from torch's group to ours (:func:`shm_process_group`).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from anyaccel.distributed.errors import DistributedSetupError
from anyaccel.distributed.exit_grace import pause_for_backend
from anyaccel.distributed.shm.c10d_object import (
    C10dObject,
    c10d_object_for,
    default_group_spec,
    spec_being_made,
)
from anyaccel.distributed.shm.group import BACKEND_NAME, SHM_ENV
from anyaccel.distributed.shm.python_group import ShmProcessGroup
from anyaccel.errors import InvalidSettingError
from anyaccel.settings import read_on_off

__all__ = ["create_group", "shm_process_group"]

logger = logging.getLogger(__name__)


#: Whether this process has said that the C++ form could not be built (said once).
_warned_python_form = False


def _device_backend_module(required: bool) -> Any:
    """The compiled ``ShmC10dBackendBuilder`` module; None where it cannot be built and need not be.

    ``required``: the spec names other devices' backends, which only the C++ form serves.
    """
    global _warned_python_form
    from anyaccel.ops.cpu.shm_c10d_backend import ShmC10dBackendBuilder
    from anyaccel.ops.errors import OpError

    try:
        return ShmC10dBackendBuilder().load()
    except OpError as exc:
        if required:
            raise DistributedSetupError(
                f"{BACKEND_NAME} beside another device's backend (such as "
                f"'cpu:{BACKEND_NAME},cuda:nccl') needs anyaccel's c10d backend class, which "
                f"could not be built here: {exc}. Install a C++ compiler and ninja, or use "
                f"'cpu:gloo,cuda:nccl' with dist.new_group(backend='{BACKEND_NAME}') for the "
                "CPU collectives"
            ) from exc
        log = logger.info if _warned_python_form else logger.warning
        _warned_python_form = True
        log(
            "%s: anyaccel's c10d backend class could not be built here (%s); the group runs as "
            "a Python ProcessGroup instead (the same results, more time per all_reduce). "
            "Install a C++ compiler and ninja for the faster form",
            BACKEND_NAME, exc,
        )  # fmt: skip
        return None


def _shm_not_turned_off() -> bool:
    """Whether :data:`SHM_ENV` leaves the shared-memory path on (a bad value: the group's
    set-up says so on every rank at once, so it counts as on here)."""
    try:
        return read_on_off(SHM_ENV) is not False
    except InvalidSettingError:
        return True


def create_group(store: Any, rank: int, size: int, timeout: timedelta) -> Any:
    """The factory ``torch.distributed`` calls on every rank of a new group.

    Returns what :func:`c10d_object_for` requires for the spec anyaccel named
    (``c10d_object.making_group``), in its faster form where it can: a Python
    :class:`ShmProcessGroup` behind a c10d ``Backend`` (``ShmBackend``,
    ``shm_c10d_backend.cpp``), which torch registers for the CPU, alone or beside other devices'
    backends. The ``Backend`` runs all_reduce itself, without Python, and forwards the rest to
    the Python group. A group of anyaccel_shm alone is
    the Python group itself where it has no shared segment (one rank, several nodes, turned
    off: every call goes to gloo) or where the class cannot be built (slower per call, the same
    results).
    """
    pause_for_backend(BACKEND_NAME)  # torch's gloo exit abort, whoever made the group
    spec = spec_being_made()
    default_spec = default_group_spec() if spec is None else None
    required = c10d_object_for(spec, default_spec) is C10dObject.CPU_BACKEND
    # Loaded before the group's set-up loads the kernel's module (a cached build of this one
    # failed to import after that, and its rebuild outlasted the set-up's timeout elsewhere).
    wanted = required or (size > 1 and _shm_not_turned_off())
    module = _device_backend_module(required) if wanted else None
    # a Python whole group torch made without a spec checks the spec at its first collective
    unchecked = spec is None and module is None
    group = ShmProcessGroup(store, rank, size, timeout, spec_known=not unchecked)
    if module is None or (group.shm.communicator is None and not required):
        return group  # no segment: every call goes to gloo, nothing for the class to run
    return module.ShmBackend(rank, size, group, group.gloo)


def shm_process_group(group: Any | None = None) -> ShmProcessGroup | None:
    """The :class:`ShmProcessGroup` that runs ``group``'s CPU collectives (None: not ours).

    ``group`` (default: the default group) is the group itself where it runs as a Python
    group, else torch's group whose CPU backend is anyaccel's c10d ``Backend``.
    """
    group = dist.group.WORLD if group is None else group
    if group is None or isinstance(group, ShmProcessGroup):
        return group
    try:
        backend = group._get_backend(torch.device("cpu"))
    except (AttributeError, RuntimeError):  # not a group, or no CPU backend
        return None
    inner = getattr(backend, "group", None)
    return inner if isinstance(inner, ShmProcessGroup) else None
