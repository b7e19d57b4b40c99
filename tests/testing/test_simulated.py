"""The simulated runtimes restore torch exactly as they found it."""

from __future__ import annotations

import torch

from anyaccel.backends import cuda
from anyaccel.testing.simulated import simulate_cpu_only_torch


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
