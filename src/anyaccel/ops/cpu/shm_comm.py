"""The shared-memory all-reduce op (DeepSpeed's ``ShareMemCommBuilder``)."""

from __future__ import annotations

import sys

from anyaccel.ops.builder import Compatibility
from anyaccel.ops.cpu.builder import CPUOpBuilder


class ShareMemCommBuilder(CPUOpBuilder):
    """One-node all-reduce through shared memory, with DeepSpeed's module interface.

    The module has ``initialize(world_size, rank)``, ``vector_kernel_level()`` and, once
    imported, ``torch.ops.deepspeed.inference_all_reduce_`` (both implemented in
    ``anyaccel.integrations.deepspeed``); anyaccel's own entry point is
    ``anyaccel.distributed.all_reduce``.
    """

    NAME = "deepspeed_shm_comm"
    SOURCES = ("shm_comm.cpp",)

    def absolute_name(self) -> str:
        """DeepSpeed's dotted name for this op."""
        return f"deepspeed.ops.comm.{self.NAME}_op"

    def platform_compatibility(self) -> Compatibility:
        """Linux only (memfd segments, /proc liveness checks); else the host-kernel checks."""
        if not sys.platform.startswith("linux"):
            return Compatibility(False, f"needs Linux shared memory, not {sys.platform}")
        return super().platform_compatibility()
