"""``HostViewBackendBuilder``: collectives for a device whose memory is host memory."""

from __future__ import annotations

from anyaccel.ops.builder import Compatibility
from anyaccel.ops.cpu.builder import CPUOpBuilder


class HostViewBackendBuilder(CPUOpBuilder):
    """A c10d ``Backend`` for a device type that runs on CPU views of its tensors.

    ``host_view_backend.cpp``: the emulated accelerator's collective backend (``emuccl``, or
    ``hccl`` where it stands in for npu) wraps a CPU ``Backend`` (anyaccel_shm's); torch
    registers it for the device only. Built on first use, with torch's headers.
    """

    NAME = "anyaccel_host_view_backend"
    SOURCES = ("host_view_backend.cpp",)

    def cxx_args(self) -> list[str]:
        """Plain -O2: the class maps tensors and forwards calls (no kernels of its own)."""
        return ["-O2"]

    def extra_ldflags(self) -> list[str]:
        """Nothing beyond torch's libraries, which every extension links."""
        return []

    def platform_compatibility(self) -> Compatibility:
        """Any platform torch builds extensions on: the class itself is plain C++."""
        return Compatibility(True)
