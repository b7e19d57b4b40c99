"""Op builders for hpu: the host (CPU) ops that offloaded training runs beside the device."""

from __future__ import annotations

from anyaccel.ops.cpu import CPUAdagradBuilder, CPUAdamBuilder, CPULionBuilder

__all__ = ["CPUAdagradBuilder", "CPUAdamBuilder", "CPULionBuilder"]
