"""Runtimes answering as ``torch.cuda``, and the CPU-only build: installed and undone exactly."""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch

from anyaccel.backends import cuda
from anyaccel.testing.simulated import simulate_cpu_only_torch, simulate_cuda, simulate_klxpu


def _build_markers() -> tuple[object, ...]:
    api = getattr(torch, "accelerator", None)
    return (
        torch.backends.cuda.is_built,
        torch.version.cuda,
        torch.version.hip,
        torch.cuda.device_count,
        torch.cuda.is_available,
        getattr(api, "current_accelerator", None),
    )


def test_cpu_only_simulation_hides_every_gpu_build_marker() -> None:
    with simulate_cpu_only_torch():
        assert torch.backends.cuda.is_built() is False  # type: ignore[no-untyped-call]
        assert torch.version.cuda is None and torch.version.hip is None
        assert torch.cuda.device_count() == 0 and torch.cuda.is_available() is False
        if hasattr(torch, "accelerator"):
            assert torch.accelerator.current_accelerator() is None
        assert cuda.probe().kind == "not_installed"


def test_cpu_only_simulation_is_undone() -> None:
    before = _build_markers()
    with simulate_cpu_only_torch():
        assert _build_markers() != before
    assert _build_markers() == before


def test_cuda_build_reports_its_cuda_version(interpreter_state: Callable[[], object]) -> None:
    before = interpreter_state()
    with simulate_cuda(device_count=2, cuda_version="12.1") as module:
        assert torch.cuda is module and sys.modules["torch.cuda"] is module  # type: ignore[comparison-overlap]
        assert torch.backends.cuda.is_built() is True  # type: ignore[no-untyped-call]
        assert (torch.version.cuda, torch.version.hip) == ("12.1", None)
        assert torch.cuda.device_count() == 2
    assert interpreter_state() == before


def test_rocm_build_reports_hip_and_no_cuda_version() -> None:
    with simulate_cuda(hip="6.2") as module:
        assert (torch.version.cuda, torch.version.hip) == (None, "6.2")
        assert "AMD" in module.get_device_name()


def test_bf16_follows_the_capability_unless_given() -> None:
    with simulate_cuda(capability=(7, 0)) as volta:
        assert volta.is_bf16_supported() is False
    with simulate_cuda(capability=(7, 0), bf16=True) as forced:
        assert forced.is_bf16_supported() is True


def test_torch_xmlir_drives_kunlunxin_devices_as_torch_cuda(
    interpreter_state: Callable[[], object],
) -> None:
    before = interpreter_state()
    with simulate_klxpu(device_count=3) as module:
        assert torch.cuda is module and module.device_type == "cuda"  # type: ignore[comparison-overlap]
        assert sys.modules["torch_xmlir"].__version__ == "2.0.1"
        assert (torch.version.cuda, torch.version.hip) == ("11.7", None)
        assert module.device_count() == 3 and not hasattr(module, "cudart")
    assert interpreter_state() == before


def test_the_stand_in_torch_cuda_carries_the_real_amp_as_torch_reaches_for_it() -> None:
    # torch.autocast on torch 2.4 asks torch.cuda.amp.common for every device type
    import importlib

    from anyaccel.testing.simulated import simulate_klxpu, simulate_supa

    real = importlib.import_module("torch.cuda.amp")
    for simulate in (simulate_cuda, simulate_klxpu, simulate_supa):
        with simulate():
            assert torch.cuda.amp is real
            assert callable(torch.cuda.amp.common.amp_definitely_not_available)
