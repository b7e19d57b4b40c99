"""Host streams, events and graphs: the no-op primitives of synchronous devices."""

from __future__ import annotations

import time

import pytest

from anyaccel.synchronous import (
    HostEvent,
    HostGraph,
    HostStream,
    call_now,
    host_graph_capture,
    host_stream_context,
)


def test_host_stream_answers_like_a_cuda_stream() -> None:
    stream = HostStream(device="cpu", priority=-1)
    stream.synchronize()
    stream.wait_stream(HostStream())
    stream.wait_event(HostEvent())
    assert stream.query() is True
    assert stream.priority == -1
    assert stream == HostStream(device="cpu")
    assert stream != HostStream(device="meta")
    assert len({stream, HostStream(device="cpu")}) == 1
    assert "cpu" in repr(stream)


def test_record_event_returns_a_recorded_event() -> None:
    event = HostStream().record_event()
    assert event.query() is True
    later = HostEvent()
    later.record()
    assert event.elapsed_time(later) >= 0.0


def test_event_measures_host_time_in_milliseconds() -> None:
    start, end = HostEvent(enable_timing=True), HostEvent(enable_timing=True)
    start.record()
    time.sleep(0.02)
    end.record()
    end.synchronize()
    end.wait()
    assert 15.0 <= start.elapsed_time(end) < 2000.0


def test_unrecorded_event_has_no_elapsed_time() -> None:
    with pytest.raises(RuntimeError, match="record"):
        HostEvent().elapsed_time(HostEvent())


def test_graph_counts_replays_and_contexts_yield_their_argument() -> None:
    graph = HostGraph()
    with host_graph_capture(graph) as captured:
        captured.capture_begin()
        captured.capture_end()
    graph.replay()
    graph.replay()
    graph.reset()
    assert graph.replays == 2
    assert graph.pool() == (0, 0)
    stream = HostStream()
    with host_stream_context(stream) as entered:
        assert entered is stream


def test_call_now_runs_the_callback() -> None:
    assert call_now(lambda: 42) == 42
