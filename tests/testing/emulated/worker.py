"""Test support: run test functions in a process with the emulated device installed.

torch names PrivateUse1 once per process, and a renamed PrivateUse1 changes what other tests
see (``torch.accelerator``), so emulated-device tests never install it in pytest's process.
``@on_emulated(...)`` sends the test to a worker process made for that configuration (one per
configuration, reused by the session) and fails with the worker's traceback; a test that hangs
past its timeout kills the worker. ``run_python`` runs a script in a fresh process, for tests of
installation itself.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import selectors
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

#: Set in a worker: the decorated tests run their bodies directly.
IN_WORKER_ENV = "ANYACCEL_EMULATED_TEST_WORKER"
#: Seconds a worker may take to start (import torch, load or build the native core).
START_TIMEOUT = 600.0
#: Set to 1 to run every ``@on_emulated`` test with strict memory (unless the test chooses).
STRICT_MEMORY_ENV = "ANYACCEL_TEST_STRICT_MEMORY"

_WORKER = r"""
import importlib, json, os, sys, traceback
config = json.loads(sys.argv[1])
replies = os.fdopen(int(sys.argv[2]), "w", buffering=1)
from anyaccel.testing.emulated import install
install(**config)
replies.write(json.dumps({"ok": True}) + "\n")
for line in sys.stdin:
    request = json.loads(line)
    try:
        module = importlib.import_module(request["module"])
        getattr(module, request["name"]).__wrapped__(**request["kwargs"])
        reply = {"ok": True}
    except BaseException:
        reply = {"ok": False, "error": traceback.format_exc()}
    replies.write(json.dumps(reply) + "\n")
"""


class _Worker:
    def __init__(self, config: dict[str, Any]) -> None:
        read, write = os.pipe()
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the worker)
        env = dict(os.environ, PYTHONPATH=_import_path(), **{IN_WORKER_ENV: "1"})
        self.process = subprocess.Popen(
            [sys.executable, "-c", _WORKER, json.dumps(config), str(write)],
            stdin=subprocess.PIPE,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            pass_fds=(write,),
            env=env,
            start_new_session=True,
        )
        os.close(write)
        self.replies = os.fdopen(read, "r")
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.replies, selectors.EVENT_READ)
        self._reply(START_TIMEOUT, "starting the worker")

    def _tail(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-4000:]

    def _reply(self, timeout: float, what: str) -> dict[str, Any]:
        if not self.selector.select(timeout):
            self.kill()
            raise AssertionError(f"{what} hung past {timeout} s; worker output:\n{self._tail()}")
        line = self.replies.readline()
        if not line:
            self.kill()
            raise AssertionError(f"the worker died while {what}; its output:\n{self._tail()}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def run(self, module: str, name: str, kwargs: dict[str, Any], timeout: float) -> None:
        assert self.process.stdin is not None
        request = {"module": module, "name": name, "kwargs": kwargs}
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        self.process.stdin.flush()
        reply = self._reply(timeout, f"running {name}")
        if not reply["ok"]:
            raise AssertionError(f"in the emulated-device worker:\n{reply['error']}")

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            os.killpg(self.process.pid, 9)
            self.process.wait()


_workers: dict[str, _Worker] = {}


@atexit.register
def _stop_workers() -> None:
    for worker in _workers.values():
        worker.kill()


def on_emulated(
    device_type: str = "emu",
    device_count: int = 2,
    memory_capacity: int | str | None = None,
    timeout: float = 120.0,
    strict_memory: bool | None = None,
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Run the decorated test in a worker that installed these emulated devices (strict memory:
    as asked, else as ``ANYACCEL_TEST_STRICT_MEMORY=1`` says)."""
    if strict_memory is None:
        strict_memory = os.environ.get(STRICT_MEMORY_ENV, "") == "1"
    config = {
        "device_type": device_type,
        "device_count": device_count,
        "memory_capacity": memory_capacity,
        "strict_memory": strict_memory,
    }
    key = json.dumps(config, sort_keys=True)

    def decorate(test: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(test)
        def run(**kwargs: Any) -> None:
            if os.environ.get(IN_WORKER_ENV):
                test(**kwargs)
                return
            worker = _workers.get(key)
            if worker is None or not worker.alive():
                worker = _workers[key] = _Worker(config)
            worker.run(test.__module__, test.__name__, kwargs, timeout)

        return run

    return decorate


def _import_path() -> str:
    """This interpreter's import path, with the anyaccel under test first."""
    import anyaccel

    source = os.path.dirname(os.path.dirname(os.path.abspath(anyaccel.__file__)))
    return os.pathsep.join([source, *sys.path])


def run_python(
    code: str, env: dict[str, str] | None = None, timeout: float = 300.0
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with this one's import path; output captured."""
    full_env = dict(os.environ, PYTHONPATH=_import_path())
    full_env.pop("DS_ACCELERATOR", None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
