"""Distributed helpers on ``torch.distributed`` for whatever accelerator is in use.

- ``environment``: ``launch_info()`` reads what torchrun, Open MPI, Intel MPI/MPICH or Slurm set,
  and ``is_launched()`` says whether any of them started this process;
- ``process_group``: ``init_distributed()`` joins the job's process group on the
  accelerator's backend;
- ``devices``: ``assign_visible_devices()`` writes a launcher's per-node device list into an
  environment, and each local rank's device is chosen;
- ``placement``: ``ddp_device_ids()``/``ddp_output_device()`` give DDP a device on an
  accelerator and ``None`` on the CPU; ``local_process_count()`` is a node's process count,
  never 0 (what ``anyaccel port`` writes for ``device_ids=[i]`` and ``torch.cuda.device_count()``);
- ``exit_grace``: ``install_exit_grace()`` pauses briefly at interpreter exit so torch's gloo
  workers finish first (else a rank can die with SIGABRT after its work is done), and
  ``pause_for_backend()`` decides which groups get it;
- ``binding``: ``bind_cores()`` splits the node's CPU cores among the local ranks, NUMA-aware;
- ``shm``: ``all_reduce()`` sums CPU tensors through shared memory when every rank shares the
  node, and ``ddp_comm_hook`` puts DDP's gradients through it; the ``torch.distributed``
  backend ``"anyaccel_shm"`` (registered on import, or when the CPU accelerator is asked for
  its backend, which names it) gives every caller of torch the same.

Imports point one way: ``errors`` at the bottom, then ``environment`` and ``exit_grace``, then
``devices``, ``binding`` and ``placement``, then ``process_group``; ``shm`` needs only
``errors``, ``environment`` and ``exit_grace`` (and the kernel in ``ops``).
``launch`` and ``allreduce`` are the old module paths, kept as re-exports.
"""

from __future__ import annotations

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
from anyaccel.distributed.environment import (
    DEFAULT_MASTER_PORT,
    LAUNCHERS,
    LaunchInfo,
    is_launched,
    launch_info,
)
from anyaccel.distributed.errors import CollectiveError, DistributedSetupError
from anyaccel.distributed.exit_grace import EXIT_GRACE_ENV, install_exit_grace
from anyaccel.distributed.placement import (
    CPU_PROCESSES_ENV,
    ddp_device_ids,
    ddp_output_device,
    local_process_count,
)
from anyaccel.distributed.process_group import BACKEND_REMEDIES, backend_choice, init_distributed
from anyaccel.distributed.shm import (
    BACKEND_NAME,
    ShmProcessGroup,
    all_reduce,
    ddp_comm_hook,
    shm_all_reduce_status,
    shm_process_group,
)

__all__ = [
    "BACKEND_NAME",
    "BACKEND_REMEDIES",
    "CPU_PROCESSES_ENV",
    "DEFAULT_MASTER_PORT",
    "EXIT_GRACE_ENV",
    "LAUNCHERS",
    "CollectiveError",
    "CoreBinding",
    "CoreBindingError",
    "DistributedSetupError",
    "LaunchInfo",
    "ShmProcessGroup",
    "Topology",
    "all_reduce",
    "assign_visible_devices",
    "backend_choice",
    "bind_cores",
    "current_binding",
    "ddp_comm_hook",
    "ddp_device_ids",
    "ddp_output_device",
    "init_distributed",
    "install_exit_grace",
    "is_launched",
    "launch_info",
    "local_process_count",
    "parse_core_list",
    "plan_core_binding",
    "shm_all_reduce_status",
    "shm_process_group",
]
