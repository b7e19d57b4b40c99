"""Distributed helpers on ``torch.distributed`` for whatever accelerator is in use.

- ``init_distributed()`` joins the job's process group from the launcher's variables
  (torchrun, DeepSpeed, Open MPI, Intel MPI/MPICH, Slurm) on the accelerator's backend;
- ``bind_cores()`` splits the node's CPU cores among the local ranks, NUMA-aware;
- ``assign_visible_devices()`` writes a launcher's per-node device list into an environment;
- ``all_reduce()`` sums CPU tensors through shared memory when every rank shares the node.
"""

from __future__ import annotations

from anyaccel.distributed.allreduce import (
    CollectiveError,
    all_reduce,
    ddp_comm_hook,
    shm_all_reduce_status,
)
from anyaccel.distributed.binding import (
    CoreBinding,
    CoreBindingError,
    Topology,
    bind_cores,
    current_binding,
    parse_core_list,
    plan_core_binding,
)
from anyaccel.distributed.devices import assign_visible_devices
from anyaccel.distributed.launch import (
    BACKEND_REMEDIES,
    DEFAULT_MASTER_PORT,
    LAUNCHERS,
    DistributedSetupError,
    LaunchInfo,
    init_distributed,
    launch_info,
)

__all__ = [
    "BACKEND_REMEDIES",
    "DEFAULT_MASTER_PORT",
    "LAUNCHERS",
    "CollectiveError",
    "CoreBinding",
    "CoreBindingError",
    "DistributedSetupError",
    "LaunchInfo",
    "Topology",
    "all_reduce",
    "assign_visible_devices",
    "bind_cores",
    "current_binding",
    "ddp_comm_hook",
    "init_distributed",
    "launch_info",
    "parse_core_list",
    "plan_core_binding",
    "shm_all_reduce_status",
]
