"""Exiting cleanly after backward on the emulated device: the autograd threads are drained first.

torch runs the backward of a device's nodes on one autograd thread per device, and that thread
drops the finished graph only after it has handed the result back. Since torch 2.13 the graph
holds a Python object (``torch.autograd.graph`` stashes the caller's ``contextvars`` context in
the thread-local state the graph copies), so the drop takes the GIL. If the caller has meanwhile
reached interpreter shutdown, that GIL request ends the thread inside a C++ destructor and the
process aborts ("terminate called without an active exception") after the script's work is
done: measured here in 10 of 52 runs pinned to one core (none of 52 with this hook). The
same race exists on a GPU. Here an ``atexit`` hook sends each device thread one backward of its
own and waits for it (at most ``DRAIN_TIMEOUT``): a thread that has run it has dropped every
earlier graph. The hook's own backward goes to torch's engine directly, without the stash (the
one private call, with ``torch.autograd.backward`` and a short pause as its fallback), so its
graph holds nothing of Python's and its late drop needs no GIL.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time

__all__ = ["drain_autograd_threads", "register_exit_drain"]

_registered = False
#: The drain's own tensors (leaf, output, gradient), kept to the end: while Python holds them,
#: the device thread's late drop of the drain's graph frees nothing of Python's, so it never
#: asks for the GIL. (A gradient that ``backward()`` made itself would be such a tensor.)
_kept: list[object] = []


def drain_autograd_threads(device_type: str, device_count: int) -> None:
    """Run one backward on each device's autograd thread and wait for it (see the module)."""
    import torch

    run_backward = getattr(
        getattr(torch.autograd.Variable, "_execution_engine", None), "run_backward", None
    )
    with torch.inference_mode(False), torch.enable_grad():
        for index in range(device_count):
            leaf = torch.zeros((), device=torch.device(device_type, index), requires_grad=True)
            output = leaf * 2
            gradient = torch.ones_like(output)
            _kept.extend((leaf, output, gradient))
            if callable(run_backward):  # (tensors, grads, keep, create, inputs, unreachable, acc)
                run_backward((output,), (gradient,), False, False, (), True, True)
            else:  # a torch without the engine's entry point: the stashing path, then a pause
                torch.autograd.backward(output, gradient)
                time.sleep(0.05)  # the GIL goes free: the device thread drops the graph now


#: Seconds exit waits for the drain: a device thread stuck in a hung collective never runs it,
#: and exit then goes on as torch has it instead of hanging.
DRAIN_TIMEOUT = 10.0


def _drain_at_exit(device_type: str, device_count: int) -> None:
    """The ``atexit`` hook (a forked child inherits it), silent on any failure: exit must go on.

    In a child forked after the parent ran backward, torch refuses autograd threads: that
    refusal is the failure swallowed here, and such a child has no device thread to drain. The
    drain runs in a daemon thread, waited for at most ``DRAIN_TIMEOUT`` seconds.
    """

    def drain() -> None:
        with contextlib.suppress(Exception):  # a drain that cannot run leaves exit as it was
            drain_autograd_threads(device_type, device_count)

    with contextlib.suppress(Exception):  # no thread can start: exit goes on without the drain
        thread = threading.Thread(target=drain, name="anyaccel-emulated-exit-drain", daemon=True)
        thread.start()
        thread.join(DRAIN_TIMEOUT)


def register_exit_drain(device_type: str, device_count: int) -> None:
    """Register the drain once per process, for ``device_count`` devices of ``device_type``."""
    global _registered
    if _registered:
        return
    _registered = True
    atexit.register(_drain_at_exit, device_type, device_count)
