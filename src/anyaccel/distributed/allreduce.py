"""The old home of the shared-memory all-reduce, kept so old imports work.

Use ``anyaccel.distributed`` (or ``anyaccel.distributed.shm``). DeepSpeed's entry points
that lived here moved to ``anyaccel.integrations.deepspeed``: ``deepspeed_initialize`` is
``shm_comm_initialize`` and ``register_deepspeed_ops`` is ``register_shm_comm_ops``.
"""

from __future__ import annotations

from anyaccel.distributed.errors import CollectiveError
from anyaccel.distributed.shm.collectives import DTYPE_CODES, OP_CODES, all_reduce
from anyaccel.distributed.shm.ddp import ddp_comm_hook
from anyaccel.distributed.shm.group import (
    SEGMENT_BUDGET,
    SHM_ENV,
    SLOT_BYTES,
    shm_all_reduce_status,
    slot_bytes,
)

__all__ = [
    "DTYPE_CODES",
    "OP_CODES",
    "SEGMENT_BUDGET",
    "SHM_ENV",
    "SLOT_BYTES",
    "CollectiveError",
    "all_reduce",
    "ddp_comm_hook",
    "shm_all_reduce_status",
    "slot_bytes",
]
