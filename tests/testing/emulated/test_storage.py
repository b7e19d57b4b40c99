"""Storages on the emulated device, as PyTorch's OpenReg tests check them: rewrapping a storage
slice with ``set_``, device storages and their location tags, named tensors from factories."""

from __future__ import annotations

import pytest
import torch

from .worker import on_emulated


@on_emulated(device_type="npu")
def test_a_rewrapped_slice_of_pinned_memory_is_pinned() -> None:
    pinned = torch.randn(10).pin_memory()
    rewrapped = torch.tensor((), dtype=torch.float32).set_(
        pinned.untyped_storage()[8:], size=(5,), stride=(1,), storage_offset=0
    )
    assert rewrapped.is_pinned() and rewrapped.data_ptr() != pinned.data_ptr()
    assert torch.equal(rewrapped, pinned[2:7])  # the slice starts 8 bytes (2 floats) in
    assert not torch.randn(10).is_pinned()  # host memory never pinned is not


@on_emulated(device_type="npu")
def test_a_rewrapped_slice_of_device_storage_reads_its_values() -> None:
    values = torch.arange(10.0, device="npu:1")
    rewrapped = torch.tensor((), dtype=torch.float32, device="npu:1").set_(
        values.untyped_storage()[8:], size=(5,), stride=(1,), storage_offset=0
    )
    assert rewrapped.device == torch.device("npu:1")
    assert rewrapped.cpu().tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]


@on_emulated(device_type="npu")
def test_device_storages_carry_their_device_through_serialization() -> None:
    assert torch.serialization.location_tag(torch.UntypedStorage(4, device="npu")) == "npu:0"
    assert torch.serialization.location_tag(torch.UntypedStorage(4, device="npu:1")) == "npu:1"
    restored = torch.serialization.default_restore_location(torch.empty(4, 4).storage(), "npu:1")
    assert restored.is_npu and restored.device == torch.device("npu:1")  # type: ignore[attr-defined]


def _factories_take_names() -> bool:
    try:
        torch.empty(1, names=("N",))  # type: ignore[call-overload]
    except TypeError:
        return False
    return True


@pytest.mark.skipif(not _factories_take_names(), reason="this torch's factories take no names=")
@on_emulated(device_type="npu")
def test_factories_make_named_device_tensors_as_on_the_cpu() -> None:
    for factory in (torch.empty, torch.zeros, torch.ones, torch.rand):
        made = factory(2, 3, names=("N", "C"), device="npu:0")  # type: ignore[call-overload]
        assert made.names == ("N", "C") and made.device == torch.device("npu:0")
