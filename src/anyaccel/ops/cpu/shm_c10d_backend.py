"""``ShmC10dBackendBuilder``: anyaccel_shm as a c10d ``Backend`` beside other devices' backends."""

from __future__ import annotations

import sys

from anyaccel.ops.builder import Compatibility
from anyaccel.ops.cpu.cpu_op_builder import CPUOpBuilder

__all__ = ["ShmBackendBuilder", "ShmC10dBackendBuilder"]


class ShmC10dBackendBuilder(CPUOpBuilder):
    """A c10d ``Backend`` forwarding to the Python ``ShmProcessGroup`` (``shm_c10d_backend.cpp``).

    ``init_process_group("cpu:anyaccel_shm,cuda:nccl")`` needs it: torch keeps a Python group
    from a plugin as the whole group (dropping the other devices), but registers a ``Backend``
    for its device only. Built on first use of such a spec, with torch's headers.
    """

    NAME = "anyaccel_shm_c10d_backend"
    SOURCES = ("shm_c10d_backend.cpp",)

    def cxx_args(self) -> list[str]:
        """Plain -O2: the class only forwards calls (no kernels, no OpenMP, no vector flags)."""
        return ["-O2"]

    def extra_ldflags(self) -> list[str]:
        """Nothing beyond torch's libraries, which every extension links."""
        return []

    def platform_compatibility(self) -> Compatibility:
        """Linux only, as the shared-memory group it forwards to."""
        if not sys.platform.startswith("linux"):
            return Compatibility(False, f"needs Linux shared memory, not {sys.platform}")
        return Compatibility(True)


#: The builder's earlier name (``anyaccel ops --build ShmBackendBuilder``, docs, scripts).
ShmBackendBuilder = ShmC10dBackendBuilder
