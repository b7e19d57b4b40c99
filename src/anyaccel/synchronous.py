"""Streams, events and graphs for devices that run in step with the host.

A backend without asynchronous streams or graph capture still hands out objects that
work in ``with`` blocks and answer the usual methods, so code written for CUDA runs
unchanged; events time with the host clock, which is exact when nothing is queued.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["HostEvent", "HostGraph", "HostStream", "host_graph_capture", "host_stream_context"]


class HostStream:
    """A stream on a device that has none: work is already done when it is queued."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.device = device
        self.priority = priority

    def synchronize(self) -> None:
        """Wait for queued work: there is none."""

    def query(self) -> bool:
        """Whether all queued work is done: always."""
        return True

    def wait_stream(self, stream: Any) -> None:
        """Order this stream after ``stream``: already so."""

    def wait_event(self, event: Any) -> None:
        """Order this stream after ``event``: already so."""

    def record_event(self, event: HostEvent | None = None) -> HostEvent:
        """Record ``event`` (a new one if ``None``) at this point of the stream."""
        event = event if event is not None else HostEvent()
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HostStream) and other.device == self.device

    def __hash__(self) -> int:
        return hash((HostStream, str(self.device)))

    def __repr__(self) -> str:
        return f"HostStream(device={self.device!r})"


class HostEvent:
    """An event recorded against the host clock; ``elapsed_time`` is in milliseconds."""

    def __init__(
        self,
        enable_timing: bool = False,
        blocking: bool = False,
        interprocess: bool = False,
        **kwargs: Any,
    ) -> None:
        self.enable_timing = enable_timing
        self._time: float | None = None

    def record(self, stream: Any = None) -> None:
        """Mark the current point in time."""
        self._time = time.perf_counter()

    def synchronize(self) -> None:
        """Wait until the event completes: it completed when it was recorded."""

    def query(self) -> bool:
        """Whether the event has completed: once recorded, always."""
        return True

    def wait(self, stream: Any = None) -> None:
        """Make ``stream`` wait for the event: nothing to wait for."""

    def elapsed_time(self, end_event: HostEvent) -> float:
        """Milliseconds from this event to ``end_event``; both must have been recorded."""
        if self._time is None or end_event._time is None:
            raise RuntimeError(
                "elapsed_time needs both events recorded: call event.record() on each first"
            )
        return (end_event._time - self._time) * 1000.0


class HostGraph:
    """A graph on a device without graph capture: replay does nothing.

    Code captured into it has already run once, eagerly, during capture.
    """

    def __init__(self, **kwargs: Any) -> None:
        self.replays = 0

    def capture_begin(self, *args: Any, **kwargs: Any) -> None:
        """Start capture: nothing is recorded."""

    def capture_end(self) -> None:
        """End capture."""

    def replay(self) -> None:
        """Replay the captured work: none was captured."""
        self.replays += 1

    def reset(self) -> None:
        """Forget the capture."""

    def pool(self) -> tuple[int, int]:
        """A memory-pool handle, meaningless here but accepted by ``capture_to_graph``."""
        return (0, 0)


@contextlib.contextmanager
def host_stream_context(stream: Any = None) -> Iterator[Any]:
    """Run the body "on" ``stream``: a plain context on a synchronous device."""
    yield stream


@contextlib.contextmanager
def host_graph_capture(graph: Any, pool: Any = None, stream: Any = None) -> Iterator[Any]:
    """Run the body eagerly in place of capturing it into ``graph``."""
    yield graph


def call_now(callback: Callable[[], Any]) -> Any:
    """Run a callback that a lazy-initialising runtime would defer: here, at once."""
    return callback()
