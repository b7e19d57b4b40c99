"""Op builders: native kernels compiled just in time for an accelerator.

``accelerator.create_op_builder("CPUAdamBuilder").load()`` returns the compiled module;
``capabilities(accelerator)`` reports which ops it can build here (``anyaccel ops`` prints it).
The optimizers live in ``anyaccel.ops.adam`` (``CPUAdam``, ``CPUAdamW``, ``DeepSpeedCPUAdam``),
``anyaccel.ops.adagrad`` and ``anyaccel.ops.lion``. This package is the kernel library below
the accelerator contract: nothing in it asks which accelerator is current.
"""

from __future__ import annotations

from anyaccel.ops.builder import BuildPlan, Compatibility, OpBuilder, extensions_root
from anyaccel.ops.capabilities import OpCapability, capabilities, format_capabilities
from anyaccel.ops.errors import BuildToolMissingError, OpBuildError, OpError, OpNotAvailableError
from anyaccel.ops.registry import builder_package, find_builder_class

__all__ = [
    "BuildPlan",
    "BuildToolMissingError",
    "Compatibility",
    "OpBuildError",
    "OpBuilder",
    "OpCapability",
    "OpError",
    "OpNotAvailableError",
    "builder_package",
    "capabilities",
    "extensions_root",
    "find_builder_class",
    "format_capabilities",
]
