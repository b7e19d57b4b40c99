"""The old home of launcher reading and process-group set-up, kept so old imports work.

Use ``anyaccel.distributed`` (or ``.environment``, ``.process_group``, ``.devices``).
"""

from __future__ import annotations

from anyaccel.distributed.devices import select_device_index
from anyaccel.distributed.environment import (
    DEFAULT_MASTER_PORT,
    LAUNCHERS,
    LauncherVariables,
    LaunchInfo,
    launch_info,
)
from anyaccel.distributed.errors import DistributedSetupError
from anyaccel.distributed.process_group import BACKEND_REMEDIES, init_distributed

__all__ = [
    "BACKEND_REMEDIES",
    "DEFAULT_MASTER_PORT",
    "LAUNCHERS",
    "DistributedSetupError",
    "LaunchInfo",
    "LauncherVariables",
    "init_distributed",
    "launch_info",
    "select_device_index",
]
