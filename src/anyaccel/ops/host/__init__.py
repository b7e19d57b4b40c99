"""Op builders for a device anyaccel has no kernels for: the host (CPU) ops beside it.

xpu, npu, mps, hpu, mlu and sdaa share this one package (``op_builder_dir()`` names it for
each of them): the host-side builders offloaded training runs beside the device.
"""

from __future__ import annotations

from anyaccel.ops.cpu import host_builders
from anyaccel.ops.cpu.host_builders import *  # noqa: F403  (the one list of host-side builders)

__all__ = [*host_builders.__all__]
