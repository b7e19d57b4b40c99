"""``anyaccel_shm``, the ``torch.distributed`` backend for CPU tensors: the documented door.

``init_process_group(backend="anyaccel_shm")`` (or ``"cpu:anyaccel_shm"``) gives every caller of
``torch.distributed`` the shared-memory collectives. This module re-exports the backend's parts,
each in the module of its job: the Python group (``python_group``, which says how collectives
are routed and fail), the c10d object a group gets (``c10d_object``), the factory torch calls
(``factory``) and the registration (``registration``).
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
