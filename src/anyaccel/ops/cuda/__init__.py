"""Op builders for CUDA/ROCm GPUs: device kernels compiled with nvcc, plus the host (CPU) ops."""

from __future__ import annotations

from anyaccel.ops.cpu import host_builders
from anyaccel.ops.cpu.host_builders import *  # noqa: F403  (the one list of host-side builders)
from anyaccel.ops.cuda.cuda_op_builder import CUDAOpBuilder
from anyaccel.ops.cuda.fused_adam import FusedAdamBuilder

__all__ = [*host_builders.__all__, "CUDAOpBuilder", "FusedAdamBuilder"]
