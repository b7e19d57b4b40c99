"""Fork-safe locks: a child forked while another thread holds one gets it unheld."""

from __future__ import annotations

import os
import threading

import pytest

from anyaccel.forksafe import ForkSafeLock, after_fork_in_child


def test_it_is_a_lock() -> None:
    lock = ForkSafeLock()
    with lock:
        assert not lock.acquire(blocking=False)
    assert lock.acquire(blocking=False)
    lock.release()
    with pytest.raises(RuntimeError):
        lock.release()


def test_reentrant_variant_nests() -> None:
    lock = ForkSafeLock(reentrant=True)
    with lock, lock:
        pass


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("reentrant", [False, True])
def test_child_gets_the_lock_unheld(reentrant: bool) -> None:
    lock = ForkSafeLock(reentrant=reentrant)
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            done.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            ok = lock.acquire(timeout=5)
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)  # never let the child run on into the rest of the test session
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(pid, 0)
    done.set()
    thread.join()
    assert answer == b"1"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_the_forking_thread_may_release_what_it_held() -> None:
    lock = ForkSafeLock()
    read, write = os.pipe()
    with lock:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                lock.release()  # leaving the with block in the child
                ok = lock.acquire(timeout=5)
                os.write(write, b"1" if ok else b"0")
            finally:
                os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(pid, 0)
    assert answer == b"1"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_after_fork_hooks_run_in_the_child_only() -> None:
    calls: list[int] = []
    after_fork_in_child(lambda: calls.append(os.getpid()))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(write, b"1" if calls == [os.getpid()] else b"0")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(pid, 0)
    assert answer == b"1" and calls == []


def test_every_lock_in_the_package_is_fork_safe() -> None:
    """No bare threading.Lock/RLock: each would hang a child forked while it was held."""
    import ast
    from pathlib import Path

    source = Path(__file__).resolve().parents[1] / "src" / "anyaccel"
    bare = []
    for path in sorted(source.rglob("*.py")):
        if path.name == "forksafe.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("Lock", "RLock")
            ):
                bare.append(f"{path.relative_to(source)}:{node.lineno}")
    assert not bare, f"use anyaccel.forksafe.ForkSafeLock instead of: {', '.join(bare)}"
