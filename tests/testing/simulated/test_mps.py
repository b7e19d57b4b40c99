"""torch.mps: the build and availability switches, one device, Apple's own memory functions."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
import torch

from anyaccel.testing.simulated import MPS_MISSING, simulate_mps


def test_torch_mps_is_installed_and_undone(interpreter_state: Callable[[], object]) -> None:
    before = interpreter_state()
    with simulate_mps() as module:
        assert torch.mps is module and sys.modules["torch.mps"] is module  # type: ignore[comparison-overlap]
        assert torch.backends.mps.is_available() is True
        assert torch.backends.mps.is_macos_or_newer(14, 0) is True
        assert torch.backends.mps.is_macos_or_newer(15, 0) is False
    assert interpreter_state() == before


@pytest.mark.parametrize(("built", "available"), [(False, True), (True, False)])
def test_no_usable_gpu_means_no_device(built: bool, available: bool) -> None:
    with simulate_mps(built=built, available=available) as module:
        assert torch.backends.mps.is_built() is built
        assert torch.backends.mps.is_available() is False and module.device_count() == 0


def test_torch_mps_lacks_the_cuda_only_names() -> None:
    with simulate_mps() as module:
        assert not any(hasattr(module, name) for name in MPS_MISSING)
        module.allocate(1024)
        assert module.current_allocated_memory() == 1024
        assert module.driver_allocated_memory() >= module.current_allocated_memory()
        with pytest.raises(ValueError, match="invalid fraction 3"):
            module.set_per_process_memory_fraction(3)
