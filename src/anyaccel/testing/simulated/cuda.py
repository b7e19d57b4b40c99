"""Runtimes that answer as ``torch.cuda``: CUDA, ROCm, Kunlunxin's torch_xmlir, and none.

``simulate_cpu_only_torch`` is the negative: whatever build is installed, torch reports no GPU.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator

import torch

from anyaccel.testing.simulated.device_module import SimulatedDeviceModule
from anyaccel.testing.simulated.patching import (
    Patch,
    installed,
    package_module,
    patched_attributes,
)

__all__ = ["simulate_cpu_only_torch", "simulate_cuda", "simulate_klxpu", "torch_build"]


def torch_build(*, cuda: str | None, hip: str | None) -> list[Patch]:
    """Patches making ``torch`` report a CUDA (``cuda``), ROCm (``hip``) or CPU-only build."""
    built = cuda is not None or hip is not None
    return [
        (torch.backends.cuda, "is_built", lambda: built),
        (torch.version, "cuda", cuda),
        (torch.version, "hip", hip),
    ]


def with_torch_amp(module: SimulatedDeviceModule) -> SimulatedDeviceModule:
    """Give the stand-in ``torch.cuda`` the real ``torch.cuda.amp``, as the real one has.

    torch's own code reaches it through ``torch.cuda`` (``torch.autocast`` asks
    ``torch.cuda.amp.common.amp_definitely_not_available()`` on torch 2.4 for every device).
    """
    setattr(module, "amp", importlib.import_module("torch.cuda.amp"))  # noqa: B010
    return module


@contextlib.contextmanager
def simulate_cuda(
    device_count: int = 1,
    capability: tuple[int, int] = (8, 0),
    *,
    hip: str | None = None,
    cuda_version: str = "12.4",
    bf16: bool | None = None,
    total_memory: int = 16 * 1024**3,
) -> Iterator[SimulatedDeviceModule]:
    """Make ``torch`` look like a CUDA build (ROCm if ``hip`` is a version) with GPUs."""
    module = SimulatedDeviceModule(
        "torch.cuda",
        device_type="cuda",
        device_count=device_count,
        capability=capability,
        total_memory=total_memory,
        device_name="Simulated AMD Instinct" if hip else "Simulated NVIDIA GPU",
        bf16=capability[0] >= 8 if bf16 is None else bf16,
    )
    with_torch_amp(module)
    with installed(module, {}, *torch_build(cuda=None if hip else cuda_version, hip=hip)):
        yield module


@contextlib.contextmanager
def simulate_cpu_only_torch() -> Iterator[None]:
    """Make ``torch`` look like a CPU-only build, whatever build is installed (CUDA, ROCm...).

    Tests about the CPU fallback use it so that they hold on a CUDA or ROCm wheel too.
    """

    def no_accelerator(check_available: bool = False) -> None:
        return None

    patches: list[Patch] = [
        *torch_build(cuda=None, hip=None),
        (torch.cuda, "device_count", lambda: 0),
        (torch.cuda, "is_available", lambda: False),
    ]
    accelerator_api = getattr(torch, "accelerator", None)  # torch >= 2.6
    if accelerator_api is not None:
        patches.append((accelerator_api, "current_accelerator", no_accelerator))
    with patched_attributes(*patches):
        yield


@contextlib.contextmanager
def simulate_klxpu(
    device_count: int = 1, *, total_memory: int = 96 * 1024**3
) -> Iterator[SimulatedDeviceModule]:
    """torch_xmlir with Kunlunxin XPUs: like the real package, it drives them as ``torch.cuda``."""
    module = SimulatedDeviceModule(
        "torch.cuda",
        device_type="cuda",
        device_count=device_count,
        total_memory=total_memory,
        device_name="Simulated Kunlunxin P800",
        host_register=None,
    )
    with_torch_amp(module)
    package = package_module("torch_xmlir", __version__="2.0.1")
    with installed(module, {"torch_xmlir": package}, *torch_build(cuda="11.7", hip=None)):
        yield module
