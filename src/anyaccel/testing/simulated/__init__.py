"""Simulated vendor runtimes: stand-ins for device modules that need hardware we lack.

Each simulation mimics a vendor's real Python API (function names, signatures, return
kinds) with CPU tensors and plain bookkeeping underneath, and records every call so a test
can check that a backend reaches the right vendor function. Installing one patches
``sys.modules`` and ``torch`` the way the real package would, and restores both on exit::

    with simulate_cuda(device_count=2, capability=(8, 0)) as cuda:
        acc = CudaAccelerator()
        assert acc.device_count() == 2 and "device_count" in cuda.calls

Functions that would create a device context in the real runtime mark the simulation
``initialized``; detection must leave it ``False`` (fork safety).

The framework lives in ``device_module`` (the recording device module) and ``patching``
(installing and undoing); each vendor family has its own module over them: ``cuda`` (CUDA,
ROCm, torch_xmlir, CPU-only torch), ``npu``, ``xpu``, ``hpu``, ``mps`` and ``privateuse1``
(mlu, sdaa, supa, musa). A new simulation joins by adding ``simulate_<name>`` here.
"""

from __future__ import annotations

from anyaccel.testing.simulated.cuda import simulate_cpu_only_torch, simulate_cuda, simulate_klxpu
from anyaccel.testing.simulated.device_module import (
    SimulatedDeviceModule,
    SimulatedDeviceProperties,
    SimulatedEvent,
    SimulatedGraph,
    SimulatedStream,
)
from anyaccel.testing.simulated.hpu import SimulatedHpuModule, simulate_hpu
from anyaccel.testing.simulated.mps import MPS_MISSING, SimulatedMpsModule, simulate_mps
from anyaccel.testing.simulated.npu import (
    SimulatedNpuModule,
    simulate_npu,
    simulate_npu_without_cann,
)
from anyaccel.testing.simulated.patching import (
    patched_attributes,
    registered_compile_backend,
    simulate_broken_import,
)
from anyaccel.testing.simulated.privateuse1 import (
    simulate_mlu,
    simulate_musa,
    simulate_sdaa,
    simulate_supa,
)
from anyaccel.testing.simulated.xpu import (
    IXDS_OLD_RELEASE_MISSING,
    XPU_NATIVE_MISSING,
    SimulatedForeignXpuAccelerator,
    SimulatedXpuModule,
    simulate_xpu,
)

__all__ = [
    "IXDS_OLD_RELEASE_MISSING",
    "MPS_MISSING",
    "XPU_NATIVE_MISSING",
    "SimulatedDeviceModule",
    "SimulatedDeviceProperties",
    "SimulatedEvent",
    "SimulatedForeignXpuAccelerator",
    "SimulatedGraph",
    "SimulatedHpuModule",
    "SimulatedMpsModule",
    "SimulatedNpuModule",
    "SimulatedStream",
    "SimulatedXpuModule",
    "patched_attributes",
    "registered_compile_backend",
    "simulate_broken_import",
    "simulate_cpu_only_torch",
    "simulate_cuda",
    "simulate_hpu",
    "simulate_klxpu",
    "simulate_mlu",
    "simulate_mps",
    "simulate_musa",
    "simulate_npu",
    "simulate_npu_without_cann",
    "simulate_sdaa",
    "simulate_supa",
    "simulate_xpu",
]
