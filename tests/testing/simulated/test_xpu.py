"""Intel GPUs on the native, IPEX and intel_extension_for_deepspeed paths."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
import torch

from anyaccel.testing.simulated import (
    IXDS_OLD_RELEASE_MISSING,
    XPU_NATIVE_MISSING,
    SimulatedForeignXpuAccelerator,
    simulate_xpu,
)


@pytest.mark.parametrize("path", ["native", "ipex", "external"])
def test_every_path_is_undone(path: str, interpreter_state: Callable[[], object]) -> None:
    before = interpreter_state()
    with simulate_xpu(path=path) as module:
        assert getattr(torch, "xpu") is module and module._is_compiled() is True  # noqa: B009
    assert interpreter_state() == before


def test_native_torch_xpu_lacks_what_ipex_adds() -> None:
    with simulate_xpu(path="native") as module:
        assert not any(hasattr(module, name) for name in XPU_NATIVE_MISSING)
        assert not hasattr(module, "lazy_init") and not hasattr(module, "itt")
        assert "intel_extension_for_pytorch" not in sys.modules


def test_ipex_extends_torch_xpu() -> None:
    with simulate_xpu(path="ipex") as module:
        assert all(hasattr(module, name) for name in XPU_NATIVE_MISSING)
        assert hasattr(module, "lazy_init") and hasattr(module, "itt") and hasattr(module, "amp")
        assert sys.modules["intel_extension_for_pytorch"]._C._has_xpu() is True
        assert "intel_extension_for_deepspeed" not in sys.modules


def test_the_external_package_brings_its_own_accelerator_class() -> None:
    with simulate_xpu(path="external", device_count=2):
        accelerator = sys.modules["intel_extension_for_deepspeed"].XPU_Accelerator()
        assert isinstance(accelerator, SimulatedForeignXpuAccelerator)
        assert accelerator.device_count() == 2 and accelerator.visible_devices_envs() == [
            "ZE_AFFINITY_MASK"
        ]


def test_an_old_external_release_lacks_the_newer_members() -> None:
    with simulate_xpu(path="external", old_external_release=True):
        old_class = sys.modules["intel_extension_for_deepspeed"].XPU_Accelerator
        assert not any(hasattr(old_class, name) for name in IXDS_OLD_RELEASE_MISSING)
        assert old_class().device_count() == 1


def test_an_unknown_path_is_refused_naming_the_valid_ones() -> None:
    expected = "path='sycl'; expected 'native', 'ipex' or 'external'"
    with pytest.raises(ValueError, match=expected), simulate_xpu(path="sycl"):
        pass
