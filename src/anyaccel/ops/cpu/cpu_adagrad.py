"""The CPU Adagrad op (DeepSpeed's ``CPUAdagradBuilder``)."""

from __future__ import annotations

from anyaccel.ops.cpu.cpu_op_builder import CPUOpBuilder


class CPUAdagradBuilder(CPUOpBuilder):
    """Fused Adagrad step over fp32 tensors, optionally writing a bf16/fp16 parameter copy."""

    NAME = "cpu_adagrad"
    SOURCES = ("cpu_optim.cpp",)
    LIBRARY = "cpu_optim"
