"""A ``torch.distributed`` backend for CPU tensors: shared memory on one node, gloo for the rest.

``init_process_group(backend="anyaccel_shm")`` (or ``"cpu:anyaccel_shm"``) gives every caller of
``torch.distributed`` (DDP, ZeRO, FSDP, plain scripts) the shared-memory collectives. The group
is a Python ``ProcessGroup`` holding a gloo group over the same ranks (same store, its own
prefix): collectives the kernel runs (``NATIVE``: all_reduce, all_gather and
all_gather_into_tensor, reduce_scatter and reduce_scatter_tensor, broadcast, barrier) go
through the group's shared-memory segment;
every other call, and any tensor the kernel cannot take (float64, complex, integer dtypes),
goes to gloo, which is also registered as the group's CPU backend so that every method not
overridden here (send/recv, all_to_all, gather, scatter, object collectives, ...) reaches it
unchanged. Reduce ops mean the same on either path (``reduction``): MIN/MAX let a NaN win,
AVG is the exact mean of floats and NCCL's truncated mean of integers, PREMUL_SUM multiplies
first.

Native calls run synchronously and return a completed ``Work`` (``wait()`` returns at once,
``get_future()`` holds the outputs, as DDP needs). Ranks that die or stall raise within the
group's timeout; ranks that pass different sizes, dtypes or ops raise on every rank. A rank
that sends one of the ``NATIVE`` collectives to gloo announces it on the segment first, so
ranks that take different paths for one call fail at once instead of at the timeout.

torch's private ground is touched in ``python_group`` only (each use listed in
``tests/test_private_ground.py``); which c10d object a group gets is decided without it:
:func:`c10d_object_for`.

This module is the backend's door (``anyaccel.backends.cpu`` names
``"anyaccel.distributed.shm.backend:cpu_backend_name"``); its parts live by job:
``python_group`` (:class:`ShmProcessGroup`), ``c10d_object`` (which c10d object a group gets),
``factory`` (what torch calls for each group) and ``registration`` (registering the name, and
whether a job uses it).
"""

from __future__ import annotations

from anyaccel.distributed.shm.c10d_object import (
    C10dObject,
    c10d_object_for,
    making_group,
    refuse_a_whole_group_beside_other_backends,
    spec_backends,
)
from anyaccel.distributed.shm.factory import create_group, shm_process_group
from anyaccel.distributed.shm.group import BACKEND_ENV, BACKEND_NAME
from anyaccel.distributed.shm.python_group import FALLBACK_TAG, NATIVE, ShmProcessGroup
from anyaccel.distributed.shm.registration import (
    backend_registered,
    cpu_backend_choice,
    cpu_backend_name,
    register_backend,
    shm_backend_wanted,
)

__all__ = [
    "BACKEND_ENV",
    "BACKEND_NAME",
    "FALLBACK_TAG",
    "NATIVE",
    "C10dObject",
    "ShmProcessGroup",
    "backend_registered",
    "c10d_object_for",
    "cpu_backend_choice",
    "cpu_backend_name",
    "create_group",
    "making_group",
    "refuse_a_whole_group_beside_other_backends",
    "register_backend",
    "shm_backend_wanted",
    "shm_process_group",
    "spec_backends",
]
