"""The CPU Adam/AdamW op (DeepSpeed's ``CPUAdamBuilder``)."""

from __future__ import annotations

from anyaccel.ops.cpu.cpu_op_builder import CPUOpBuilder


class CPUAdamBuilder(CPUOpBuilder):
    """Fused Adam/AdamW step over fp32 tensors, optionally writing a bf16/fp16 parameter copy."""

    NAME = "cpu_adam"
    SOURCES = ("cpu_optim.cpp",)
    LIBRARY = "cpu_optim"
