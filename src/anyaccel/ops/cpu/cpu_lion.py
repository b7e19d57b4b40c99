"""The CPU Lion op (DeepSpeed's ``CPULionBuilder``)."""

from __future__ import annotations

from anyaccel.ops.cpu.cpu_op_builder import CPUOpBuilder


class CPULionBuilder(CPUOpBuilder):
    """Fused Lion step over fp32 tensors, optionally writing a bf16/fp16 parameter copy."""

    NAME = "cpu_lion"
    SOURCES = ("cpu_optim.cpp",)
    LIBRARY = "cpu_optim"
