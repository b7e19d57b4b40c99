"""A short pause at interpreter exit, so torch's gloo workers finish before Python shuts down.

torch's gloo worker threads can still be releasing a finished collective's tensors when the
interpreter finalises; the release needs the GIL, CPython ends the thread inside a C++
destructor, and the process dies with "terminate called without an active exception"
(SIGABRT) after the work is done. It is torch's hazard (a plain DDP script on gloo hits it),
more likely on a loaded host. Pausing at exit, with the GIL released, lets the workers finish
first. Whether a backend gets the pause is decided here alone (:func:`pause_for_backend`), and
asked wherever a CPU group is made: the ``anyaccel_shm`` factory (every caller of
``init_process_group``), ``init_distributed()``, the Lightning strategies, accelerate's
``install()``; ``ddp_device_ids()``/``ddp_output_device()`` on the CPU; and the CPU
accelerator's ``communication_backend_name()`` in a launched rank.
"""

from __future__ import annotations

import atexit
import math
import os
import time

from anyaccel.distributed.errors import DistributedSetupError
from anyaccel.forksafe import ForkSafeLock

__all__ = [
    "CPU_BACKENDS",
    "DEFAULT_EXIT_GRACE_S",
    "EXIT_GRACE_ENV",
    "backend_names",
    "exit_grace_seconds",
    "install_exit_grace",
    "pause_for_backend",
]

#: Seconds to pause at exit; 0 turns the pause off.
EXIT_GRACE_ENV = "ANYACCEL_EXIT_GRACE"
#: The pause when ``EXIT_GRACE_ENV`` is unset (0 of 27 launches aborted with it, 11 of 27 without).
DEFAULT_EXIT_GRACE_S = 0.2
#: Longer than this is a typo, not a grace period.
_MAX_GRACE_S = 60.0
#: The process-group backends whose jobs run gloo workers on CPU tensors, so get the pause.
CPU_BACKENDS = frozenset({"gloo", "anyaccel_shm"})

_lock = ForkSafeLock()
_installed = False


def exit_grace_seconds() -> float:
    """The pause ``EXIT_GRACE_ENV`` asks for (seconds, 0 to 60), else the default.

    Raises :class:`DistributedSetupError` naming the value when it is not such a number.
    """
    value = os.environ.get(EXIT_GRACE_ENV, "").strip()
    if not value:
        return DEFAULT_EXIT_GRACE_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not 0.0 <= seconds <= _MAX_GRACE_S:  # also refuses nan
        raise DistributedSetupError(
            f"{EXIT_GRACE_ENV}={value!r} is not a number of seconds from 0 to {_MAX_GRACE_S:g}; "
            f"set it to 0 to turn the pause at exit off, or unset it for "
            f"{DEFAULT_EXIT_GRACE_S:g} s"
        )
    return seconds


def install_exit_grace() -> bool:
    """Pause at interpreter exit (once per process); False when ``EXIT_GRACE_ENV`` is 0.

    Raises :class:`DistributedSetupError` when ``EXIT_GRACE_ENV`` is malformed, so the mistake
    shows where the job starts rather than at its end.
    """
    global _installed
    seconds = exit_grace_seconds()
    if seconds == 0.0:
        return False
    with _lock:
        if not _installed:
            atexit.register(_pause_at_exit)
            _installed = True
    return True


def backend_names(spec: str) -> list[str]:
    """The backends a spec names: ``"gloo"``, or each of ``"cpu:gloo,cuda:nccl"``."""
    return [part.rpartition(":")[2].strip() for part in spec.split(",") if part.strip()]


def pause_for_backend(spec: str) -> bool:
    """Install the pause when ``spec`` names a CPU backend (:data:`CPU_BACKENDS`); else False.

    The one place that decides which groups get the pause. Raises like
    :func:`install_exit_grace` when ``EXIT_GRACE_ENV`` is malformed.
    """
    if not CPU_BACKENDS & {name.lower() for name in backend_names(spec)}:
        return False
    return install_exit_grace()


def _pause_at_exit() -> None:
    """The atexit handler: never raises, whatever the variable says by now."""
    try:
        seconds = exit_grace_seconds()
    except DistributedSetupError:
        seconds = DEFAULT_EXIT_GRACE_S
    if seconds > 0.0:
        time.sleep(seconds)  # releases the GIL: the workers can take it and finish
