"""PrivateUse1 vendor packages: ``torch_<vendor>`` attaching ``torch.<vendor>``.

Cambricon (torch_mlu), Tecorigin (torch_sdaa), Biren (torch_supa) and Moore Threads
(torch_musa) ship the same shape of runtime; each ``simulate_<vendor>`` is its data sheet.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from anyaccel.testing.simulated.cuda import with_torch_amp
from anyaccel.testing.simulated.device_module import SimulatedDeviceModule
from anyaccel.testing.simulated.patching import Patch, installed, package_module

__all__ = ["simulate_mlu", "simulate_musa", "simulate_sdaa", "simulate_supa"]


def _simulate_privateuse1(
    package: str,
    device_type: str,
    device_count: int,
    *,
    device_name: str,
    graph_class_name: str | None,
    profiler_name: str | None,
    cuda_compat: bool = False,
    emulated: bool = False,
) -> contextlib.AbstractContextManager[SimulatedDeviceModule]:
    """``package`` attaching ``torch.<device_type>`` (and ``torch.cuda`` with ``cuda_compat``).

    With ``emulated``, the devices are anyaccel's emulated devices named ``device_type``.
    """
    sheet: dict[str, Any] = dict(
        device_type=device_type,
        device_name=device_name,
        graph_class_name=graph_class_name,
        profiler_name=profiler_name,
        host_register=None,
    )
    name = f"{package}.{device_type}"
    if emulated:  # imported here: that module builds on this package's device_module
        from anyaccel.emulated.vendors.modules import emulated_module
    module = (
        emulated_module(SimulatedDeviceModule, device_count, name, **sheet)
        if emulated
        else SimulatedDeviceModule(name, device_count=device_count, **sheet)
    )
    packages = {package: package_module(package, **{device_type: module})}
    extra: list[Patch] = []
    if cuda_compat:  # the compat layer sets the CUDA markers; torch.version.hip stays as it was
        with_torch_amp(module)
        extra = [
            (torch, "cuda", module),
            (torch.backends.cuda, "is_built", lambda: True),
            (torch.version, "cuda", "12.1"),
        ]
    return installed(module, packages, *extra)


def simulate_mlu(
    device_count: int = 1, *, emulated: bool = False
) -> contextlib.AbstractContextManager[SimulatedDeviceModule]:
    """torch_mlu with ``device_count`` Cambricon MLUs (``MLUGraph``, ``cnpx`` ranges)."""
    return _simulate_privateuse1(
        "torch_mlu",
        "mlu",
        device_count,
        device_name="MLU590",
        graph_class_name="MLUGraph",
        profiler_name="cnpx",
        emulated=emulated,
    )


def simulate_sdaa(
    device_count: int = 1, *, emulated: bool = False
) -> contextlib.AbstractContextManager[SimulatedDeviceModule]:
    """torch_sdaa with ``device_count`` Tecorigin SDAA devices (no graphs)."""
    return _simulate_privateuse1(
        "torch_sdaa",
        "sdaa",
        device_count,
        device_name="T100",
        graph_class_name=None,
        profiler_name=None,
        emulated=emulated,
    )


def simulate_supa(
    device_count: int = 1, *, cuda_compat: bool = True, emulated: bool = False
) -> contextlib.AbstractContextManager[SimulatedDeviceModule]:
    """torch_supa with Biren GPUs, also answering as ``torch.cuda`` like the real package."""
    return _simulate_privateuse1(
        "torch_supa",
        "supa",
        device_count,
        device_name="BR106",
        graph_class_name="SUPAGraph",
        profiler_name=None,
        cuda_compat=cuda_compat,
        emulated=emulated,
    )


def simulate_musa(
    device_count: int = 1, *, cuda_compat: bool = False, emulated: bool = False
) -> contextlib.AbstractContextManager[SimulatedDeviceModule]:
    """torch_musa with Moore Threads GPUs (with ``cuda_compat``, a CUDA-compat layer too)."""
    return _simulate_privateuse1(
        "torch_musa",
        "musa",
        device_count,
        device_name="MTT S4000",
        graph_class_name="MUSAGraph",
        profiler_name=None,
        cuda_compat=cuda_compat,
        emulated=emulated,
    )
