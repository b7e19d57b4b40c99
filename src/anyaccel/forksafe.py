"""Locks that a forked child gets back unheld.

``os.fork()`` copies a lock in whatever state the parent's threads left it; a lock held by
another thread at that moment is held forever in the child, and the child's first
``get_accelerator()`` (or op load) hangs. Every lock in anyaccel is a :class:`ForkSafeLock`,
renewed in the child through ``os.register_at_fork``. New locks should be made the same way.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from types import TracebackType

__all__ = ["ForkSafeLock", "after_fork_in_child"]

_locks: weakref.WeakSet[ForkSafeLock] = weakref.WeakSet()


class ForkSafeLock:
    """A ``threading.Lock`` (or ``RLock`` with ``reentrant=True``) renewed in a forked child."""

    def __init__(self, *, reentrant: bool = False) -> None:
        self._reentrant = reentrant
        self._lock = self._new_lock()
        self._renewed = False
        _locks.add(self)

    def _new_lock(self) -> threading.Lock | threading.RLock:
        return threading.RLock() if self._reentrant else threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock, as ``threading.Lock.acquire``."""
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        """Give the lock back (a release left over from before a fork is ignored)."""
        try:
            self._lock.release()
        except RuntimeError:
            if not self._renewed:  # the forking thread held it: the child's copy is fresh
                raise

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()

    def _renew(self) -> None:
        self._lock = self._new_lock()
        self._renewed = True


def after_fork_in_child(function: Callable[[], None]) -> None:
    """Run ``function`` in every child forked from now on (after the locks are renewed)."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=function)


def _renew_all() -> None:
    for lock in list(_locks):
        lock._renew()


after_fork_in_child(_renew_all)
