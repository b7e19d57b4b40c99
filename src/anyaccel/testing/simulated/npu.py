"""torch_npu (Huawei Ascend): the runtime with NPUs, and an install missing the CANN libraries."""

from __future__ import annotations

import contextlib
import os
import sys
import types
import warnings
from collections.abc import Iterator
from typing import Any

from anyaccel.testing.simulated.device_module import SimulatedDeviceModule
from anyaccel.testing.simulated.patching import (
    AUTOLOAD_ENV,
    installed,
    package_module,
    simulate_broken_import,
)

__all__ = ["SimulatedMstx", "SimulatedNpuModule", "simulate_npu", "simulate_npu_without_cann"]


class SimulatedNpuModule(SimulatedDeviceModule):
    """torch_npu's ``torch.npu``: ``get_device_capability()`` is ``None`` unless configured."""

    def get_device_capability(self, device: Any = None) -> Any:
        self._index(device)
        return None


class SimulatedMstx(types.ModuleType):
    """torch_npu's ``torch.npu.mstx``: marks, and ranges known by id (it keeps no stack).

    ``range_start(message, stream=None)`` returns the id ``range_end(range_id)`` takes, and 0
    (with a warning, nothing opened) for an empty message, as torch_npu does. ``marks``,
    ``open`` (id to message) and ``closed`` record what was called.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.marks: list[str] = []
        self.open: dict[int, str] = {}
        self.closed: list[str] = []
        self._next_id = 1

    def mark(self, message: str = "", stream: Any = None, domain: str = "default") -> None:
        self.marks.append(message)

    def range_start(self, message: str, stream: Any = None, domain: str = "default") -> int:
        if not message or not isinstance(message, str):
            warnings.warn(
                f"mstx.range_start needs a non-empty message string, got {message!r}",
                stacklevel=2,
            )
            return 0
        range_id = self._next_id
        self._next_id += 1
        self.open[range_id] = message
        return range_id

    def range_end(self, range_id: int, domain: str = "default") -> None:
        message = self.open.pop(range_id, None)
        if message is not None:
            self.closed.append(message)


@contextlib.contextmanager
def simulate_npu(
    device_count: int = 1,
    *,
    bf16: bool = True,
    total_memory: int = 64 * 1024**3,
    emulated: bool = False,
) -> Iterator[SimulatedDeviceModule]:
    """torch_npu imported with ``device_count`` Ascend NPUs visible.

    With ``emulated``, the NPUs are anyaccel's emulated devices named ``npu`` (tensors live on
    ``npu:0``; ``total_memory`` is then the device's real capacity, the host's memory).
    """
    sheet: dict[str, Any] = dict(
        device_type="npu",
        total_memory=total_memory,
        device_name="Simulated Ascend910B",
        bf16=bf16,
        graph_class_name="NPUGraph",
        profiler_name=None,
        host_register=("npurt", "npuHostRegister", "npuHostUnregister"),
    )
    if emulated:  # imported here: that module builds on this package's device_module
        from anyaccel.emulated.vendors.modules import emulated_module
    module = (
        emulated_module(SimulatedNpuModule, device_count, "torch_npu.npu", **sheet)
        if emulated
        else SimulatedNpuModule("torch_npu.npu", device_count=device_count, **sheet)
    )
    module.mstx = SimulatedMstx("torch_npu.npu.mstx")  # type: ignore[attr-defined]
    package = package_module("torch_npu", npu=module, __version__="2.13.0")
    with installed(module, {"torch_npu": package, "torch_npu.npu": module}):
        yield module


def simulate_npu_without_cann(*, exit_on_import: bool = False) -> Any:
    """torch_npu installed without the Ascend CANN libraries.

    Like torch_npu 2.x, the import first switches ``TORCH_DEVICE_BACKEND_AUTOLOAD`` off, then
    fails on ``libhccl.so``; with ``exit_on_import`` it prints a hint and calls ``sys.exit()``
    as older releases did.
    """

    def fail() -> None:
        os.environ[AUTOLOAD_ENV] = "0"
        if exit_on_import:
            print("Please check that the cann package is installed. Please run 'source set_env.sh'")
            print("libhccl.so: cannot open shared object file: No such file or directory")
            sys.exit()
        raise ImportError("libhccl.so: cannot open shared object file: No such file or directory")

    return simulate_broken_import("torch_npu", fail)
