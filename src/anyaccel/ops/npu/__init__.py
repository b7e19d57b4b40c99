"""Op builders for npu: the host (CPU) ops that offloaded training runs beside the device."""

from __future__ import annotations

from anyaccel.ops.cpu import host_builders
from anyaccel.ops.cpu.host_builders import *  # noqa: F403  (the one list of host-side builders)

__all__ = [*host_builders.__all__]
