"""torch.<type>: torch.cuda's device calls, answered for the emulated devices."""

from __future__ import annotations

import pytest
import torch

from .worker import on_emulated


@on_emulated(device_count=3)
def test_the_module_reports_the_installed_devices() -> None:
    assert torch.emu.is_available() and torch.emu.is_initialized()
    assert torch.emu.device_count() == 3
    assert torch.emu.get_device_name(2) == "anyaccel emulated emu (host memory)"
    properties = torch.emu.get_device_properties("emu:2")
    assert properties.name == torch.emu.get_device_name() and properties.total_memory > 0


@on_emulated()
def test_torch_sees_the_device_as_its_accelerator() -> None:
    assert torch.device("emu:1").type == "emu"
    assert torch.accelerator.current_accelerator() == torch.device("emu")
    assert torch.accelerator.device_count() == 2


@on_emulated()
def test_devices_are_named_by_index_string_or_device() -> None:
    tensor = torch.empty(256, dtype=torch.uint8, device="emu:1")
    counted = torch.emu.memory_allocated(1)
    assert torch.emu.memory_allocated("emu:1") == counted
    assert torch.emu.memory_allocated(torch.device("emu", 1)) == counted
    with pytest.raises(ValueError, match="Expected a emu device, but got: 'cpu'"):
        torch.emu.memory_allocated("cpu")
    del tensor


@on_emulated()
def test_the_device_context_restores_the_previous_device() -> None:
    assert torch.emu.current_device() == 0
    with torch.emu.device("emu:1"):
        assert torch.emu.current_device() == 1
    assert torch.emu.current_device() == 0


@on_emulated()
def test_init_is_there_and_idempotent_as_torch_cuda_init() -> None:
    torch.emu.init()
    torch.emu.init()
    assert torch.emu.is_initialized()


@on_emulated()
def test_the_capability_query_reports_every_dtype_the_cpu_has() -> None:
    if not hasattr(torch.accelerator, "get_device_capability"):
        pytest.skip("this torch has no torch.accelerator.get_device_capability")
    supported = torch.accelerator.get_device_capability("emu:1")["supported_dtypes"]
    expected = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64]
    assert all(dtype in supported for dtype in [*expected, torch.complex64, torch.bool])
    assert torch.accelerator.get_device_capability() == torch.accelerator.get_device_capability(0)


@on_emulated()
def test_the_module_capability_is_a_cuda_style_pair_checked_by_index() -> None:
    assert torch.emu.get_device_capability() == (0, 0) == torch.emu.get_device_capability("emu:1")
    with pytest.raises(ValueError, match="Invalid device index 5"):
        torch.emu.get_device_capability(5)
