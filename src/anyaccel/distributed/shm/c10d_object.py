"""Which c10d object a group of the ``anyaccel_shm`` backend gets: the whole group, or a CPU
``Backend`` beside other devices' backends (:func:`c10d_object_for`, the one rule).

torch passes a backend's factory no device map: anyaccel's own calls say the spec they make a
group with (:func:`making_group`); a group torch made without it reads its spec back at its
first collective (:func:`refuse_a_whole_group_beside_other_backends`).
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import torch.distributed as dist

from anyaccel.distributed.errors import DistributedSetupError
from anyaccel.distributed.shm.group import BACKEND_NAME

__all__ = [
    "C10dObject",
    "c10d_object_for",
    "default_group_spec",
    "making_group",
    "refuse_a_whole_group_beside_other_backends",
    "spec_backends",
    "spec_being_made",
]


class C10dObject(str, enum.Enum):
    """What :data:`BACKEND_NAME`'s factory gives torch for one group (:func:`c10d_object_for`)."""

    WHOLE_GROUP = "whole group"  # a Python ProcessGroup, which torch takes as the whole group
    CPU_BACKEND = "cpu backend"  # a c10d Backend, which torch registers for CPU tensors only


#: The backend spec of the group anyaccel is asking torch to make now (None: not anyaccel).
_group_spec: ContextVar[str | None] = ContextVar("anyaccel_shm_group_spec", default=None)


def spec_being_made() -> str | None:
    """The spec :func:`making_group` names for the group being made now (None: not anyaccel's)."""
    return _group_spec.get()


@contextlib.contextmanager
def making_group(spec: str) -> Iterator[None]:
    """Within it, a group torch makes with :data:`BACKEND_NAME` is made for backend ``spec``.

    torch passes the factory no device map, so anyaccel's own calls (``init_distributed``)
    say it this way; ``spec`` is what they pass to ``init_process_group`` / ``new_group``.
    """
    token = _group_spec.set(spec)
    try:
        yield
    finally:
        _group_spec.reset(token)


def spec_backends(spec: str) -> dict[str, str]:
    """The backend each device type gets in ``spec`` (``""`` for a plain name), lowercased."""
    entries = [entry.strip() for entry in spec.lower().split(",") if entry.strip()]
    if len(entries) == 1 and ":" not in entries[0]:
        return {"": entries[0]}
    return {
        device.strip(): backend.strip()
        for device, _, backend in (entry.partition(":") for entry in entries)
    }


def c10d_object_for(spec: str | None, default_spec: str | None = None) -> C10dObject:
    """Which c10d object a group whose backend ``spec`` names :data:`BACKEND_NAME` gets.

    The one rule. anyaccel_shm the group's only backend (``"anyaccel_shm"``,
    ``"cpu:anyaccel_shm"``): the whole group (torch's group over anyaccel's c10d ``Backend``
    where it builds and the group has shared memory, else the Python ``ProcessGroup``).
    Another device given another backend (``"cpu:anyaccel_shm,cuda:nccl"``): a c10d
    ``Backend`` for CPU tensors that torch registers beside the others (compiled; refused,
    naming the fix, where it cannot be built). ``spec`` None (torch called directly, which
    tells the factory no spec): judged by ``default_spec``, the default group's, where that
    names anyaccel_shm (a ``new_group()`` naming no backend inherits it, as DDP, FSDP and
    DeepSpeed make their subgroups); otherwise the whole group, which reads its spec back
    from torch at its first collective and refuses one that names other backends.
    """
    inherited = default_spec is not None and BACKEND_NAME in spec_backends(default_spec).values()
    known = spec if spec is not None else (default_spec if inherited else None)
    if known is None:
        return C10dObject.WHOLE_GROUP
    others = {backend for backend in spec_backends(known).values() if backend != BACKEND_NAME}
    return C10dObject.CPU_BACKEND if others else C10dObject.WHOLE_GROUP


def default_group_spec() -> str | None:
    """The default group's backend spec (torch's public ``get_backend_config``), None without."""
    if not dist.is_initialized():
        return None
    try:
        return str(dist.get_backend_config())
    except (RuntimeError, ValueError, KeyError, AttributeError):
        return None


def _beside_others_advice() -> str:
    return (
        f"pass the spec to anyaccel.distributed.init_distributed() (for a subgroup: call "
        f"new_group inside anyaccel.distributed.shm.backend.making_group(spec)), which makes "
        f"{BACKEND_NAME} a c10d Backend for CPU tensors beside the others, or use "
        f"'cpu:gloo,cuda:nccl' with dist.new_group(backend='{BACKEND_NAME}') for the CPU "
        "collectives"
    )


def refuse_a_whole_group_beside_other_backends(group: Any) -> None:
    """Raise if torch took ``group`` as the whole group of a spec that names other backends.

    That happens only when torch was called directly with such a spec (the factory could not
    know it); torch's public ``get_backend_config`` says the spec once the group exists.
    """
    try:
        spec = str(dist.get_backend_config(group))
    except (RuntimeError, ValueError, KeyError, AttributeError, TypeError):
        return  # a group torch does not know (made by hand): nothing to compare
    if c10d_object_for(spec) is C10dObject.CPU_BACKEND:
        raise DistributedSetupError(
            f"this group was made with backend {spec!r} by torch.distributed directly, so "
            f"{BACKEND_NAME} could not tell it shares the group with other backends, and "
            f"torch took it as the whole group (the others would never run): "
            f"{_beside_others_advice()}"
        )
