"""host_view and device_tensor_from_host: host memory and device memory are one memory."""

from __future__ import annotations

import pytest
import torch

from .worker import on_emulated


@on_emulated()
def test_host_view_has_the_device_tensors_geometry() -> None:
    from anyaccel.testing.emulated import host_view

    base = torch.arange(24.0, device="emu:1").reshape(4, 6)
    view = base[1:, ::2].t()
    host = host_view(view)
    assert host.device == torch.device("cpu")
    assert (host.size(), host.stride(), host.storage_offset()) == (
        view.size(),
        view.stride(),
        view.storage_offset(),
    )
    assert torch.equal(host, view.cpu())


@on_emulated()
def test_host_view_writes_show_on_the_device_and_back() -> None:
    from anyaccel.testing.emulated import host_view

    device = torch.zeros(2, 3, device="emu:0")
    host = host_view(device)
    host[1, 2] = 5.0
    assert device[1, 2].item() == 5.0
    device.add_(1)
    assert torch.equal(host, torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 6.0]]))
    assert host.data_ptr() == device.data_ptr()


@on_emulated()
def test_host_view_keeps_the_device_memory_alive() -> None:
    from anyaccel.testing.emulated import host_view

    before = torch.emu.memory_allocated(0)
    device = torch.full((1024,), 3.0, device="emu:0")
    host = host_view(device)
    del device
    assert torch.emu.memory_allocated(0) == before + 4096
    assert host.sum().item() == 3.0 * 1024
    del host
    assert torch.emu.memory_allocated(0) == before


@on_emulated()
def test_host_view_refuses_a_cpu_tensor() -> None:
    from anyaccel.testing.emulated import host_view

    with pytest.raises(RuntimeError, match="host_view expects a tensor on the emulated emu"):
        host_view(torch.zeros(2))


@on_emulated()
def test_device_tensor_from_host_shares_memory_and_is_counted() -> None:
    from anyaccel.testing.emulated import device_tensor_from_host

    before = torch.emu.memory_allocated(1)
    host = torch.arange(6, dtype=torch.int64).reshape(2, 3)
    device = device_tensor_from_host(host, "emu:1")
    assert device.device == torch.device("emu:1")
    assert torch.emu.memory_allocated(1) == before + 48
    device.mul_(2)
    assert torch.equal(host, torch.arange(0, 12, 2).reshape(2, 3))
    del device
    assert torch.emu.memory_allocated(1) == before
