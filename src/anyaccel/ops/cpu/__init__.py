"""Op builders for the CPU accelerator: host kernels compiled for this CPU's vector units."""

from __future__ import annotations

from anyaccel.emulated.builders import HostViewBackendBuilder
from anyaccel.ops.cpu import host_builders
from anyaccel.ops.cpu.builder import CPUOpBuilder
from anyaccel.ops.cpu.host_builders import *  # noqa: F403  (the one list of host-side builders)
from anyaccel.ops.cpu.shm_backend import ShmBackendBuilder
from anyaccel.ops.cpu.shm_comm import ShareMemCommBuilder

__all__ = [
    *host_builders.__all__,
    "CPUOpBuilder",
    "HostViewBackendBuilder",
    "ShareMemCommBuilder",
    "ShmBackendBuilder",
]
