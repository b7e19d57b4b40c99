"""One guard for code anyaccel does not control: plugin imports, probes and constructors.

:func:`run_guarded` runs such code in a daemon thread and waits at most
``ANYACCEL_PROBE_TIMEOUT`` seconds (default 10). Whatever it raises, ``SystemExit``
included, comes back as a value; only ``KeyboardInterrupt`` goes on up. Code that overruns is
abandoned (the thread keeps running, detection does not wait for it). Guarded code that asks
for the accelerator while detection runs gets a :class:`~anyaccel.errors.ReentrantDetectionError`
naming it, and the guard reports the re-entry even if that code swallowed the error.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import FrozenInstanceError
from typing import Generic, TypeVar

from anyaccel.errors import InvalidSettingError, ReentrantDetectionError

__all__ = [
    "DEFAULT_PROBE_TIMEOUT",
    "PROBE_TIMEOUT_ENV",
    "Guarded",
    "guarded_code_running",
    "patience",
    "probe_timeout",
    "refuse_reentry",
    "run_guarded",
]

#: The environment variable bounding each guarded call, in seconds.
PROBE_TIMEOUT_ENV = "ANYACCEL_PROBE_TIMEOUT"
#: The bound when the variable is unset.
DEFAULT_PROBE_TIMEOUT = 10.0

T = TypeVar("T")


def probe_timeout() -> float | None:
    """Seconds each plugin import, probe or constructor may take (``None``: no limit)."""
    value = os.environ.get(PROBE_TIMEOUT_ENV)
    if value is None or not value.strip():
        return DEFAULT_PROBE_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if math.isnan(seconds) or seconds <= 0:
        raise InvalidSettingError(
            f"{PROBE_TIMEOUT_ENV}={value!r} is not a positive number of seconds; set it to e.g. "
            f"{DEFAULT_PROBE_TIMEOUT:g} (or 'inf' for no limit), or unset it"
        )
    return None if math.isinf(seconds) else seconds


class _Scope:
    """The guarded call this context belongs to, what it re-entered, and its paused clock.

    A plain class, not a dataclass: a dataclass compiles its methods when the module is
    imported, a cost every first detection paid.
    """

    __slots__ = ("label", "paused_seconds", "paused_since", "reentered")

    def __init__(self, label: str) -> None:
        self.label = label
        self.reentered: list[str] = []
        #: When the work its clock does not count began (``None``: none now), and how long
        #: such work took before. Written by the guarded thread, read by the waiting one.
        self.paused_since: float | None = None
        self.paused_seconds = 0.0

    def counted(self, since: float) -> float:
        """Seconds since ``since`` that count against the time limit."""
        now = time.perf_counter()
        paused = self.paused_seconds + (now - self.paused_since if self.paused_since else 0.0)
        return now - since - paused


_scope: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar(
    "anyaccel_guarded_scope", default=None
)


def guarded_code_running() -> str | None:
    """The label of the guarded code this context runs in, or ``None`` outside the guard."""
    scope = _scope.get()
    return scope.label if scope is not None else None


@contextlib.contextmanager
def patience() -> Iterator[None]:
    """Stop the guarded call's clock while this block runs: announced work, not a hang.

    anyaccel's own native builds run in it (a plugin whose runtime stand-in installs the
    emulated device builds its core on first use: a minute, not the probe's ten seconds).
    Outside the guard it does nothing; nested blocks pause once.
    """
    scope = _scope.get()
    if scope is None or scope.paused_since is not None:
        yield
        return
    scope.paused_since = time.perf_counter()
    try:
        yield
    finally:
        scope.paused_seconds += time.perf_counter() - scope.paused_since
        scope.paused_since = None


def refuse_reentry(api: str) -> None:
    """Raise ``ReentrantDetectionError`` if ``api`` is being called from guarded code."""
    scope = _scope.get()
    if scope is None:
        return
    scope.reentered.append(api)
    raise ReentrantDetectionError(
        f"{api}() was called while anyaccel detection runs, from {scope.label}. Code that "
        "runs during detection (a plugin's import, probe or constructor) must not ask for "
        "the accelerator: return a ProbeOutcome from the probe and call get_accelerator() "
        "after detection, e.g. in the accelerator's methods"
    )


class Guarded(Generic[T]):
    """What one guarded call did: its value, or what went wrong, and how long it took.

    Immutable, as a frozen dataclass, but written out: a dataclass compiles its methods when
    the module is imported, a cost every first detection paid.
    """

    __slots__ = ("error", "label", "reentered", "seconds", "timed_out", "value")
    label: str
    value: T | None
    error: BaseException | None
    timed_out: bool
    seconds: float
    reentered: tuple[str, ...]

    def __init__(
        self,
        label: str,
        value: T | None,
        error: BaseException | None,
        timed_out: bool,
        seconds: float,
        reentered: tuple[str, ...] = (),
    ) -> None:
        fields = (label, value, error, timed_out, seconds, reentered)
        for name, field_value in zip(_GUARDED_FIELDS, fields, strict=True):
            object.__setattr__(self, name, field_value)

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in _GUARDED_FIELDS)
        return f"{type(self).__qualname__}({fields})"

    @property
    def ok(self) -> bool:
        """Whether the call returned normally, in time, without re-entering detection."""
        return self.error is None and not self.timed_out and not self.reentered

    def problem(self) -> str:
        """What went wrong, in words (empty when nothing did)."""
        if self.timed_out:
            return (
                f"did not return within {self.seconds:.1f} s ({PROBE_TIMEOUT_ENV}); "
                "abandoned, still running in a background thread"
            )
        if self.reentered:
            return (
                f"called {self.reentered[0]}() while detection runs (re-entrant detection) "
                f"after {self.seconds * 1000:.1f} ms"
            )
        if self.error is not None:
            error = self.error
            if isinstance(error, SystemExit):
                return f"called sys.exit({error.code!r}) after {self.seconds * 1000:.1f} ms"
            return f"raised {type(error).__name__}: {error} after {self.seconds * 1000:.1f} ms"
        return ""


#: ``Guarded``'s fields, in the order its constructor takes them.
_GUARDED_FIELDS = ("label", "value", "error", "timed_out", "seconds", "reentered")


def run_guarded(label: str, function: Callable[[], T], timeout: float | None) -> Guarded[T]:
    """Call ``function`` behind the guard; ``timeout`` seconds at most (``None``: no limit)."""
    scope = _Scope(label)
    context = contextvars.copy_context()
    outcome: dict[str, object] = {}
    finished = threading.Event()

    def call() -> T:
        _scope.set(scope)
        return function()

    def target() -> None:
        try:
            outcome["value"] = context.run(call)
        except BaseException as error:  # contained: SystemExit and all
            outcome["error"] = error
        finally:
            finished.set()

    start = time.perf_counter()
    thread = threading.Thread(target=target, name=f"anyaccel-guard {label}", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # no thread can start (interpreter shutting down): run it here
        target()
    done = finished.wait(timeout)
    while not done and timeout is not None:  # the clock stops while the call is patient
        left = timeout - scope.counted(start)
        if left <= 0 and scope.paused_since is None:
            break
        done = finished.wait(min(max(left, 0.05), 1.0))
    seconds = time.perf_counter() - start
    if not done:
        return Guarded(label, None, None, True, seconds, tuple(scope.reentered))
    error = outcome.get("error")
    if isinstance(error, KeyboardInterrupt):
        raise error
    value = outcome.get("value")
    return Guarded(
        label,
        value,  # type: ignore[arg-type]
        error if isinstance(error, BaseException) else None,
        False,
        seconds,
        tuple(scope.reentered),
    )
