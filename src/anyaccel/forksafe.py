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

__all__ = ["ForkSafeLock", "after_fork_in_child", "native_threads"]

_locks: weakref.WeakSet[ForkSafeLock] = weakref.WeakSet()

#: Whether this process has run one of our OpenMP regions with more than one thread; and
#: whether it is a child forked after that (GNU OpenMP's thread pool does not survive a fork:
#: the child's next parallel region waits forever for threads that no longer exist).
_openmp_used = False
_openmp_stale = False


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


def native_threads(requested: int) -> int:
    """The thread count a compiled kernel may use now: ``requested``, or 1 in a forked child.

    A child forked after our kernels ran in parallel steps serially rather than hang in the
    OpenMP runtime's stale thread pool.
    """
    global _openmp_used
    if _openmp_stale:
        return 1
    if requested > 1:
        _openmp_used = True
    return requested


def _renew_all() -> None:
    global _openmp_stale
    for lock in list(_locks):
        lock._renew()
    _openmp_stale = _openmp_stale or _openmp_used


after_fork_in_child(_renew_all)
