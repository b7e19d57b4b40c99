"""Streams and events on the emulated device: CUDA's ordering, run synchronously."""

from __future__ import annotations

import pytest
import torch

from .worker import on_emulated


@on_emulated()
def test_new_streams_are_distinct_and_the_default_is_stream_zero() -> None:
    first, second = torch.emu.Stream(device="emu:1"), torch.emu.Stream(device="emu:1")
    assert first.stream_id != second.stream_id
    assert first.device == torch.device("emu:1")
    assert torch.emu.default_stream(1).stream_id == 0
    assert torch.emu.current_stream(1) == torch.emu.default_stream(1)


@on_emulated()
def test_the_stream_context_makes_a_stream_current_and_restores_it() -> None:
    side = torch.emu.Stream(device="emu:0")
    with torch.emu.stream(side):
        assert torch.emu.current_stream() == side
        result = torch.ones(3, device="emu:0") * 2
    assert torch.emu.current_stream() == torch.emu.default_stream(0)
    side.synchronize()
    assert side.query() and result.tolist() == [2.0, 2.0, 2.0]


@on_emulated()
def test_wait_stream_and_events_order_work_as_on_cuda() -> None:
    main, side = torch.emu.current_stream(), torch.emu.Stream(device="emu:0")
    data = torch.zeros(4, device="emu:0")
    side.wait_stream(main)
    with torch.emu.stream(side):
        data.add_(1)
        data.record_stream(side)
    done = side.record_event()
    main.wait_event(done)
    assert done.query()
    assert data.tolist() == [1.0] * 4


@on_emulated()
def test_elapsed_time_between_timed_events() -> None:
    start = torch.emu.Event(device="emu:0", enable_timing=True)
    end = torch.emu.Event(device="emu:0", enable_timing=True)
    start.record()
    torch.randn(64, 64, device="emu:0").matmul(torch.randn(64, 64, device="emu:0"))
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0


@on_emulated()
def test_elapsed_time_needs_timing_events_as_on_cuda() -> None:
    start, end = torch.emu.Event(device="emu:0"), torch.emu.Event(device="emu:0")
    start.record()
    end.record()
    with pytest.raises((RuntimeError, ValueError), match="enable_timing=True"):
        start.elapsed_time(end)


@on_emulated()
def test_synchronize_checks_the_index() -> None:
    torch.emu.synchronize()
    torch.emu.synchronize("emu:1")
    with pytest.raises(ValueError, match="Invalid device index 5"):
        torch.emu.synchronize(5)
