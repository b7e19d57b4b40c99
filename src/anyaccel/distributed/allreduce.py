"""The old home of the shared-memory all-reduce, kept so old imports work.

Use ``anyaccel.distributed`` (or ``anyaccel.distributed.shm``). DeepSpeed's entry points
that lived here moved to ``anyaccel.integrations.deepspeed``: ``deepspeed_initialize`` is
``shm_comm_initialize`` and ``register_deepspeed_ops`` is ``register_shm_comm_ops``.
"""

from __future__ import annotations

from typing import Any

from anyaccel.distributed.errors import CollectiveError
from anyaccel.distributed.shm.codes import table
from anyaccel.distributed.shm.collectives import all_reduce
from anyaccel.distributed.shm.ddp import ddp_comm_hook
from anyaccel.distributed.shm.group import (
    SEGMENT_BUDGET,
    SHM_ENV,
    SLOT_BYTES,
    shm_all_reduce_status,
    slot_bytes,
)

__all__ = [
    "SEGMENT_BUDGET",
    "SHM_ENV",
    "SLOT_BYTES",
    "CollectiveError",
    "all_reduce",
    "ddp_comm_hook",
    "shm_all_reduce_status",
    "slot_bytes",
]


def __getattr__(name: str) -> dict[Any, int]:
    """``DTYPE_CODES`` and ``OP_CODES``: the kernel's code tables (``shm.codes.table``)."""
    return table(name, __name__)
