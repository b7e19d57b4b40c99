"""Op builders for the CPU accelerator: host kernels compiled for this CPU's vector units."""

from __future__ import annotations

from anyaccel.ops.cpu.builder import CPUOpBuilder
from anyaccel.ops.cpu.cpu_adagrad import CPUAdagradBuilder
from anyaccel.ops.cpu.cpu_adam import CPUAdamBuilder
from anyaccel.ops.cpu.cpu_lion import CPULionBuilder
from anyaccel.ops.cpu.shm_comm import ShareMemCommBuilder

__all__ = [
    "CPUAdagradBuilder",
    "CPUAdamBuilder",
    "CPULionBuilder",
    "CPUOpBuilder",
    "ShareMemCommBuilder",
]
