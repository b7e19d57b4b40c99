"""The CUDA fused Adam op (DeepSpeed's ``FusedAdamBuilder``)."""

from __future__ import annotations

from anyaccel.ops.cuda.cuda_op_builder import CUDAOpBuilder


class FusedAdamBuilder(CUDAOpBuilder):
    """One-kernel Adam/AdamW step on CUDA tensors (fp32 math, fp32/fp16/bf16 parameters)."""

    NAME = "fused_adam"
    SOURCES = ("fused_adam.cu",)
