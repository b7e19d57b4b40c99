"""Collectives through shared memory for the ranks of one node.

- ``group``: a process group's shared-memory state, set up once per group (collectively);
- ``collectives``: ``all_reduce`` (and later its siblings), each falling back to
  ``torch.distributed`` where the kernel cannot help;
- ``ddp``: the DDP communication hook on top of ``all_reduce``;
- ``backend``: the ``torch.distributed`` backend ``"anyaccel_shm"`` (shared memory for CPU
  tensors, gloo for the rest), registered with torch when this package is imported.

The kernel itself is the ``ShmCommBuilder`` op (``anyaccel.ops.cpu.shm_comm``); ``codes``
reads its codes for dtypes, ops and collectives from it (``DTYPE_CODES`` and ``OP_CODES``, once
defined here, are its tables, read when first asked for).
"""

from __future__ import annotations

import contextlib
from typing import Any

from anyaccel.distributed.errors import DistributedSetupError
from anyaccel.distributed.shm.backend import (
    BACKEND_ENV,
    BACKEND_NAME,
    ShmProcessGroup,
    register_backend,
    shm_process_group,
)
from anyaccel.distributed.shm.codes import table
from anyaccel.distributed.shm.collectives import all_reduce
from anyaccel.distributed.shm.ddp import ddp_comm_hook
from anyaccel.distributed.shm.group import (
    SHM_ENV,
    ShmGroup,
    group_state,
    shm_all_reduce_status,
    slot_bytes,
)

__all__ = [
    "BACKEND_ENV",
    "BACKEND_NAME",
    "SHM_ENV",
    "ShmGroup",
    "ShmProcessGroup",
    "all_reduce",
    "ddp_comm_hook",
    "group_state",
    "register_backend",
    "shm_all_reduce_status",
    "shm_process_group",
    "slot_bytes",
]


def __getattr__(name: str) -> dict[Any, int]:
    """``DTYPE_CODES`` and ``OP_CODES``: the kernel's code tables (``codes.table``)."""
    return table(name, __name__)


# So that init_process_group(backend="anyaccel_shm") works once anyaccel.distributed is
# imported; on too old a torch, init_distributed() says why when asked for the backend.
with contextlib.suppress(DistributedSetupError):
    register_backend()
