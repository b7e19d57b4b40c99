"""Saving, loading and pinned host memory with emulated devices."""

from __future__ import annotations

import io

import torch

from .worker import on_emulated


def _round_trip(value: object, **load: object) -> object:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load)  # type: ignore[arg-type]


@on_emulated()
def test_saved_device_tensors_load_back_on_their_devices() -> None:
    loaded = _round_trip(
        {"a": torch.arange(3.0, device="emu:0"), "b": torch.ones(2, device="emu:1")}
    )
    assert isinstance(loaded, dict)
    assert loaded["a"].device == torch.device("emu:0") and loaded["a"].tolist() == [0.0, 1.0, 2.0]
    assert loaded["b"].device == torch.device("emu:1")


@on_emulated()
def test_map_location_moves_saved_tensors_both_ways() -> None:
    to_cpu = _round_trip(torch.arange(3.0, device="emu:1"), map_location="cpu")
    to_device = _round_trip(torch.arange(3.0), map_location="emu:1")
    assert isinstance(to_cpu, torch.Tensor) and to_cpu.device == torch.device("cpu")
    assert isinstance(to_device, torch.Tensor) and to_device.device == torch.device("emu:1")
    assert to_device.tolist() == to_cpu.tolist() == [0.0, 1.0, 2.0]


@on_emulated()
def test_a_module_state_dict_round_trips_through_the_device() -> None:
    model = torch.nn.Linear(3, 2).to("emu:0")
    state = _round_trip(model.state_dict())
    fresh = torch.nn.Linear(3, 2).to("emu:0")
    fresh.load_state_dict(state)  # type: ignore[arg-type]
    assert torch.equal(fresh.weight.cpu(), model.weight.cpu())


@on_emulated()
def test_pin_memory_pins_through_the_device_hooks() -> None:
    plain = torch.arange(8.0)
    pinned = plain.pin_memory()
    assert not plain.is_pinned()
    assert pinned.is_pinned()
    assert torch.equal(pinned, plain)
    assert torch.equal(pinned.to("emu:0", non_blocking=True).cpu(), plain)


@on_emulated()
def test_an_empty_pinned_tensor_is_pinned() -> None:
    assert torch.empty(16, pin_memory=True).is_pinned()
