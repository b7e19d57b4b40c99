"""The emulated device's native parts, built with torch's headers on first use (or ahead of
time: ``anyaccel ops --build EmulatedDeviceBuilder HostViewBackendBuilder``)."""

from __future__ import annotations

import os

from anyaccel.emulated.spec import MAX_DEVICES
from anyaccel.emulated.state import native_core_problem
from anyaccel.ops.builder import Compatibility, OpBuilder
from anyaccel.probe import torch_release

__all__ = ["CSRC_DIR", "EmulatedDeviceBuilder", "HostViewBackendBuilder"]

#: Directory holding the device's C++ sources.
CSRC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc")


class EmulatedDeviceBuilder(OpBuilder):
    """torch's PrivateUse1 device in host memory (``csrc/emulated_device.cpp``).

    One translation unit including one header per concern (``devices.h``, ``allocator.h``,
    ``memory_protection.h``, ``generator.h``, ``guard.h``, ``deferred_copies.h``, ``hooks.h``,
    ``host_alias.h``, ``cpu_kernel_ops.h``, ``fallback.h``, ``kernels.h``, ``sparse.h``,
    ``rnn_cells.h``, ``sdpa.h``, ``autocast.h``, ``stream_clocks.h``): torch's headers are most
    of a build, so they are compiled once. Loading it registers the guard, the fallback and the
    kernels with torch, so it is built and loaded only when the emulated device is installed (or
    pre-built: ``anyaccel ops --build``).
    """

    NAME = "emulated_device"

    def sources(self) -> list[str]:
        """The one translation unit."""
        return [os.path.join(CSRC_DIR, "emulated_device.cpp")]

    def depends(self) -> list[str]:
        """The headers the translation unit includes (their contents enter the build hash)."""
        return sorted(
            os.path.join(CSRC_DIR, name) for name in os.listdir(CSRC_DIR) if name.endswith(".h")
        )

    def cxx_args(self) -> list[str]:
        """-O2, torch's version for the ``#if`` around interfaces that changed, and the size of
        the device table (``MAX_DEVICES``, defined once in ``spec``)."""
        major, minor = torch_release()
        return [
            "-O2",
            f"-DANYACCEL_TORCH_MAJOR={major}",
            f"-DANYACCEL_TORCH_MINOR={minor}",
            f"-DANYACCEL_EMULATED_MAX_DEVICES={MAX_DEVICES}",
        ]

    def platform_compatibility(self) -> Compatibility:
        """Any platform torch builds extensions on, with torch at least ``MINIMUM_TORCH`` and
        PrivateUse1 not taken by another runtime in this process."""
        problem = native_core_problem()
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
