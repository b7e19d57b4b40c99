"""``EmulatedDeviceBuilder``: the emulated accelerator's native core, built with torch's headers."""

from __future__ import annotations

import os

from anyaccel.ops.builder import OpBuilder

#: Directory holding the device's C++ source.
CSRC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc")


class EmulatedDeviceBuilder(OpBuilder):
    """torch's PrivateUse1 device in host memory (``csrc/emulated_device.cpp``).

    One translation unit: allocator, device guard, hooks, generator, the boxed CPU fallback and
    the kernels a fallback cannot provide. Loading it registers them with torch, so it is built
    and loaded only when the emulated device is installed.
    """

    NAME = "emulated_device"

    def sources(self) -> list[str]:
        """The one C++ source."""
        return [os.path.join(CSRC_DIR, "emulated_device.cpp")]

    def cxx_args(self) -> list[str]:
        """-O2, and torch's version for the ``#if`` around interfaces that changed."""
        import torch

        major, minor = (int(part) for part in torch.__version__.split(".")[:2])
        return ["-O2", f"-DANYACCEL_TORCH_MAJOR={major}", f"-DANYACCEL_TORCH_MINOR={minor}"]
