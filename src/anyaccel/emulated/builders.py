"""The emulated device's native parts, built with torch's headers on first use (or ahead of
time: ``anyaccel ops --build EmulatedDeviceBuilder HostViewBackendBuilder``)."""

from __future__ import annotations

import os

from anyaccel.emulated.state import torch_problem, torch_version
from anyaccel.ops.builder import Compatibility, OpBuilder

__all__ = ["CSRC_DIR", "EmulatedDeviceBuilder", "HostViewBackendBuilder"]

#: Directory holding the device's C++ sources.
CSRC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc")


class EmulatedDeviceBuilder(OpBuilder):
    """torch's PrivateUse1 device in host memory (``csrc/emulated_device.cpp``).

    One translation unit: allocator, device guard, hooks, generator, the boxed CPU fallback and
    the kernels a fallback cannot provide. Loading it registers them with torch, so it is built
    and loaded only when the emulated device is installed.
    """

    NAME = "emulated_device"

    def sources(self) -> list[str]:
        """The one translation unit."""
        return [os.path.join(CSRC_DIR, "emulated_device.cpp")]

    def cxx_args(self) -> list[str]:
        """-O2, and torch's version for the ``#if`` around interfaces that changed."""
        major, minor = torch_version()
        return ["-O2", f"-DANYACCEL_TORCH_MAJOR={major}", f"-DANYACCEL_TORCH_MINOR={minor}"]

    def platform_compatibility(self) -> Compatibility:
        """Any platform torch builds extensions on, with torch at least ``MINIMUM_TORCH``."""
        problem = torch_problem()
        return Compatibility(problem is None, problem or "")


class HostViewBackendBuilder(OpBuilder):
    """The emulated device's c10d ``Backend``: collectives on CPU views of its tensors.

    ``csrc/host_view_backend.cpp``: the emulated accelerator's collective backend (``emuccl``,
    or ``hccl`` where it stands in for npu) wraps a CPU ``Backend`` (anyaccel_shm's); torch
    registers it for the device only. Built on first use, with torch's headers.
    """

    NAME = "anyaccel_host_view_backend"

    def sources(self) -> list[str]:
        """The one C++ source."""
        return [os.path.join(CSRC_DIR, "host_view_backend.cpp")]

    def cxx_args(self) -> list[str]:
        """Plain -O2: the class maps tensors and forwards calls (no kernels of its own)."""
        return ["-O2"]

    def platform_compatibility(self) -> Compatibility:
        """Any platform torch builds extensions on: the class itself is plain C++."""
        return Compatibility(True)
