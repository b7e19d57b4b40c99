"""Reading before the device is done: a non_blocking copy into pinned memory lands at a sync."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from .worker import on_emulated, run_python


def _queued() -> int:
    from anyaccel.emulated.state import native

    return int(native().queued_copies())


def _drain() -> None:
    """Land whatever earlier tests in this worker left queued."""
    for index in range(torch.emu.device_count()):
        torch.emu.synchronize(index)


def _copied(value: float = 2.0, size: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """A pinned buffer of zeros with a non_blocking copy of ``value``s from emu:0 queued into it."""
    _drain()
    source = torch.full((size,), value, device="emu:0")
    buffer = torch.zeros(size, pin_memory=True)
    buffer.copy_(source, non_blocking=True)
    return source, buffer


@on_emulated()
def test_a_pinned_non_blocking_copy_holds_stale_values_until_the_device_synchronizes() -> None:
    _, buffer = _copied()
    assert buffer.tolist() == [0.0] * 4 and _queued() == 1
    torch.emu.synchronize()
    assert buffer.tolist() == [2.0] * 4 and _queued() == 0


@on_emulated()
def test_to_cpu_non_blocking_gives_a_pinned_tensor_filled_at_the_event_wait() -> None:
    _drain()
    source = torch.arange(6.0, device="emu:0")
    copied = (source * 3).to("cpu", non_blocking=True)
    assert copied.is_pinned() and _queued() == 1
    done = torch.Event(device=torch.device("emu:0"))
    done.record()
    done.synchronize()
    assert copied.tolist() == [0.0, 3.0, 6.0, 9.0, 12.0, 15.0] and _queued() == 0


@on_emulated()
def test_the_copy_takes_the_sources_values_at_enqueue_and_outlives_the_source() -> None:
    source, buffer = _copied(5.0)
    source.fill_(7.0)  # later work on the stream: the copy ran before it
    del source
    torch.emu.synchronize()
    assert buffer.tolist() == [5.0] * 4


@on_emulated()
def test_an_event_recorded_before_the_copy_does_not_land_it_one_after_does() -> None:
    before = torch.Event(device=torch.device("emu:0"))
    before.record()
    _, buffer = _copied()
    before.synchronize()
    assert buffer.tolist() == [0.0] * 4
    after = torch.Event(device=torch.device("emu:0"))
    after.record()
    assert after.query()
    assert buffer.tolist() == [2.0] * 4


@on_emulated()
def test_a_stream_sync_lands_its_own_copies_only() -> None:
    side = torch.emu.Stream(device="emu:0")
    with torch.emu.stream(side):
        _, buffer = _copied()
    torch.emu.current_stream().synchronize()
    assert torch.emu.current_stream().query()
    assert buffer.tolist() == [0.0] * 4
    side.synchronize()
    assert buffer.tolist() == [2.0] * 4


@on_emulated()
def test_stream_query_lands_the_streams_copies() -> None:
    _, buffer = _copied()
    assert torch.emu.current_stream().query()
    assert buffer.tolist() == [2.0] * 4


@on_emulated()
def test_a_wait_on_a_side_streams_event_carries_its_copies_to_the_waiting_stream() -> None:
    side = torch.emu.Stream(device="emu:0")
    with torch.emu.stream(side):
        _, buffer = _copied()
    torch.emu.current_stream().wait_stream(side)
    assert buffer.tolist() == [0.0] * 4  # a wait orders device work; the host has not waited
    torch.emu.current_stream().synchronize()
    assert buffer.tolist() == [2.0] * 4


@on_emulated()
def test_a_blocking_copy_to_the_host_syncs_its_stream() -> None:
    source, buffer = _copied()
    assert source.cpu().tolist() == [2.0] * 4
    assert buffer.tolist() == [2.0] * 4


@on_emulated()
def test_item_syncs_its_stream() -> None:
    source, buffer = _copied()
    assert source.sum().item() == 8.0
    assert buffer.tolist() == [2.0] * 4


@on_emulated()
def test_a_non_blocking_copy_into_pageable_memory_is_immediate() -> None:
    source = torch.full((4,), 3.0, device="emu:0")
    pageable = torch.zeros(4)
    _drain()
    pageable.copy_(source, non_blocking=True)
    assert not pageable.is_pinned() and pageable.tolist() == [3.0] * 4 and _queued() == 0


@on_emulated()
def test_a_non_blocking_copy_into_pageable_memory_leaves_earlier_copies_queued() -> None:
    source, buffer = _copied()
    torch.zeros(4).copy_(source, non_blocking=True)  # CUDA: only "might be synchronous"
    assert buffer.tolist() == [0.0] * 4
    torch.zeros(4).copy_(source)  # a blocking copy syncs the stream
    assert buffer.tolist() == [2.0] * 4


@on_emulated()
def test_a_copy_from_the_pinned_buffer_back_to_the_device_sees_the_queued_values() -> None:
    _, buffer = _copied(4.0)
    back = buffer.to("emu:0", non_blocking=True)  # after the queued copy, in stream order
    assert back.cpu().tolist() == [4.0] * 4


@on_emulated()
def test_two_copies_into_one_buffer_land_in_order() -> None:
    buffer = torch.zeros(2, pin_memory=True)
    buffer.copy_(torch.ones(2, device="emu:0"), non_blocking=True)
    buffer.copy_(torch.full((2,), 9.0, device="emu:0"), non_blocking=True)
    torch.emu.synchronize()
    assert buffer.tolist() == [9.0, 9.0]


@on_emulated()
def test_a_device_sync_lands_only_that_devices_copies() -> None:
    buffer = torch.zeros(2, pin_memory=True)
    buffer.copy_(torch.ones(2, device="emu:1"), non_blocking=True)
    torch.emu.synchronize(0)
    assert buffer.tolist() == [0.0, 0.0]
    torch.emu.synchronize(1)
    assert buffer.tolist() == [1.0, 1.0]


@on_emulated()
def test_a_copy_into_a_leaf_that_requires_grad_lands_at_a_sync_outside_no_grad() -> None:
    master = torch.zeros(3, pin_memory=True).requires_grad_(True)
    with torch.no_grad():
        master.copy_(torch.ones(3, device="emu:0"), non_blocking=True)
    torch.emu.synchronize()
    assert master.detach().tolist() == [1.0, 1.0, 1.0]


@on_emulated()
def test_the_queue_is_bounded_the_oldest_copies_land_first() -> None:
    _drain()
    buffers = [torch.zeros(1, pin_memory=True) for _ in range(1100)]
    source = torch.ones(1, device="emu:0")
    for buffer in buffers:
        buffer.copy_(source, non_blocking=True)
    assert _queued() == 1024
    assert buffers[0].item() == 1.0 and buffers[-1].item() == 0.0
    torch.emu.synchronize()
    assert all(buffer.item() == 1.0 for buffer in buffers)


@on_emulated()
def test_torch_accelerator_synchronize_lands_the_copies() -> None:
    if not hasattr(torch, "accelerator") or not hasattr(torch.accelerator, "synchronize"):
        pytest.skip("this torch has no torch.accelerator.synchronize")
    _, buffer = _copied()
    torch.accelerator.synchronize(0)
    assert buffer.tolist() == [2.0] * 4


@on_emulated()
def test_offload_then_synchronize_as_deepspeed_does_keeps_working() -> None:
    from anyaccel import get_accelerator

    accelerator: Any = get_accelerator()
    weights = torch.randn(64, device="emu:0")
    offloaded = accelerator.pin_memory(torch.empty(64))
    offloaded.copy_(weights, non_blocking=True)
    accelerator.synchronize()
    assert torch.equal(offloaded, weights.cpu())
    stream = accelerator.Stream()
    with accelerator.stream(stream):
        offloaded.copy_(weights * 2, non_blocking=True)
    stream.synchronize()
    assert torch.equal(offloaded, (weights * 2).cpu())


def test_a_process_exits_cleanly_with_copies_still_queued() -> None:
    result = run_python(
        "import torch\n"
        "from anyaccel.testing.emulated import install\n"
        "install('emu', 1)\n"
        "buffer = torch.zeros(4, pin_memory=True)\n"
        "buffer.copy_(torch.ones(4, device='emu:0'), non_blocking=True)\n"
        "print(buffer.tolist())\n"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "[0.0, 0.0, 0.0, 0.0]" in result.stdout
