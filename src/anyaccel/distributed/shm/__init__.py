"""Collectives through shared memory for the ranks of one node.

- ``group``: a process group's shared-memory state, set up once per group (collectively);
- ``collectives``: ``all_reduce`` (and later its siblings), each falling back to
  ``torch.distributed`` where the kernel cannot help;
- ``ddp``: the DDP communication hook on top of ``all_reduce``.

The kernel itself is the ``ShareMemCommBuilder`` op (``anyaccel.ops.cpu.shm_comm``).
"""

from __future__ import annotations

from anyaccel.distributed.shm.collectives import DTYPE_CODES, OP_CODES, all_reduce
from anyaccel.distributed.shm.ddp import ddp_comm_hook
from anyaccel.distributed.shm.group import (
    SHM_ENV,
    ShmGroup,
    group_state,
    shm_all_reduce_status,
    slot_bytes,
)

__all__ = [
    "DTYPE_CODES",
    "OP_CODES",
    "SHM_ENV",
    "ShmGroup",
    "all_reduce",
    "ddp_comm_hook",
    "group_state",
    "shm_all_reduce_status",
    "slot_bytes",
]
