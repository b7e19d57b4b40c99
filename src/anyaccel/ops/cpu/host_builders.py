"""The host-side op builders: CPU kernels that offloaded training runs beside any device.

Every device's op package (``cpu``, ``cuda``, and ``host`` for the rest) re-exports exactly this
list (``from anyaccel.ops.cpu.host_builders import *``), so DeepSpeed finds ``CPUAdamBuilder``
under any accelerator's ``op_builder_dir()`` and a new host-side builder is one edit: here.
"""

from __future__ import annotations

from anyaccel.ops.cpu.cpu_adagrad import CPUAdagradBuilder
from anyaccel.ops.cpu.cpu_adam import CPUAdamBuilder
from anyaccel.ops.cpu.cpu_lion import CPULionBuilder

__all__ = ["CPUAdagradBuilder", "CPUAdamBuilder", "CPULionBuilder"]
