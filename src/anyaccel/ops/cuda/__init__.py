"""Op builders for CUDA/ROCm GPUs: device kernels compiled with nvcc, plus the host (CPU) ops."""

from __future__ import annotations

from anyaccel.ops.cpu import CPUAdagradBuilder, CPUAdamBuilder, CPULionBuilder
from anyaccel.ops.cuda.builder import CUDAOpBuilder
from anyaccel.ops.cuda.fused_adam import FusedAdamBuilder

__all__ = [
    "CPUAdagradBuilder",
    "CPUAdamBuilder",
    "CPULionBuilder",
    "CUDAOpBuilder",
    "FusedAdamBuilder",
]
