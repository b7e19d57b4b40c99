"""Op builders for the CPU accelerator: host kernels compiled for this CPU's vector units."""

from __future__ import annotations

from anyaccel.emulated.native_builders import HostViewBackendBuilder
from anyaccel.ops.cpu import host_builders
from anyaccel.ops.cpu.cpu_op_builder import CPUOpBuilder
from anyaccel.ops.cpu.host_builders import *  # noqa: F403  (the one list of host-side builders)
from anyaccel.ops.cpu.shm_c10d_backend import ShmBackendBuilder, ShmC10dBackendBuilder
from anyaccel.ops.cpu.shm_comm import ShareMemCommBuilder, ShmCommBuilder

__all__ = [
    *host_builders.__all__,
    "CPUOpBuilder",
    "HostViewBackendBuilder",
    "ShareMemCommBuilder",
    "ShmBackendBuilder",
    "ShmC10dBackendBuilder",
    "ShmCommBuilder",
]
