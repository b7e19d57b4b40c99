"""A vendor's PyTorch extension that registers its ``vpu`` device when imported.

No backend autoload (no ``torch.backends`` entry point): the device exists only in a process
that imported this package, as with a vendor package a script imports by hand. The runtime is
anyaccel's simulated device module (two devices, no tensors); the package lives outside
``PYTHONPATH`` and is put on ``sys.path`` by the script that imports it.
"""

from __future__ import annotations

import torch

from anyaccel.testing.simulated.device_module import SimulatedDeviceModule

torch.utils.rename_privateuse1_backend("vpu")
vpu = SimulatedDeviceModule(
    "torch_vpu.vpu",
    device_type="vpu",
    device_count=2,
    device_name="Simulated VPU",
    graph_class_name=None,
    profiler_name=None,
    host_register=None,
)
torch._register_device_module("vpu", vpu)
