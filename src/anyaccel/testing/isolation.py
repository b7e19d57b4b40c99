"""The conformance kit's checks in a worker process, so the target cannot take the report down.

``run_isolated`` starts ``python -m anyaccel.testing.isolation`` with the target's import path;
the worker loads the target and runs the checks one by one, announcing each on a private pipe.
A target that exits, crashes or hangs fails the check it was in (a hang after ``timeout``
seconds: the worker's process group is killed); a new worker runs the remaining checks.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import IO, Any

from anyaccel.testing.conformance import (
    CHECKS,
    CheckResult,
    ConformanceError,
    ConformanceReport,
    describe_exception,
)

__all__ = ["DEFAULT_TIMEOUT", "import_reference", "run_isolated"]

#: Seconds one check (or loading the target) may take before it is failed as hung.
DEFAULT_TIMEOUT = 60.0
#: Seconds a fresh worker may take to import torch and the kit before loading the target.
STARTUP_TIMEOUT = 180.0
#: Seconds the worker may take to install emulated devices: a first use builds their native
#: core (one to two minutes on a busy two-core machine), which ``--timeout`` must not cut short.
INSTALL_TIMEOUT = 600.0
#: Name of the pseudo-check that reports a target that could not be imported or created.
LOAD_CHECK = "load"


def import_reference(obj: object) -> str | None:
    """``"module:qualname"`` under which a worker process can import ``obj``, or ``None``.

    Strings are taken as references already; lambdas, local classes, instances and objects
    of ``__main__`` cannot be imported by another process.
    """
    if isinstance(obj, str):
        return obj
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or module == "__main__":
        return None
    if "<" in qualname:  # <locals>, <lambda>
        return None
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception:
        return None
    return f"{module}:{qualname}" if found is obj else None


@dataclass
class _WorkerRun:
    """What one worker reported before it finished, died or was killed."""

    results: list[CheckResult] = field(default_factory=list)
    accelerator: str | None = None
    load_failure: str | None = None
    current: str | None = None  # the check running when the worker stopped
    phase: str = "starting"  # starting, installing, loading, checking, done
    ending: str = ""  # how the worker stopped, when it did not finish
    output: str = ""  # what it printed last then (a crash's stack)


def run_isolated(
    target: object,
    checks: Iterable[str] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    simulate: str | None = None,
    context: object = None,
    emulated: str | None = None,
) -> ConformanceReport:
    """Run ``checks`` against ``target`` in worker processes and report every check.

    ``target`` is ``"module:Class"`` or an importable class or factory; ``simulate`` names an
    ``anyaccel.testing.simulated.simulate_NAME`` runtime and ``context`` an importable context
    factory, entered in the worker. ``emulated`` (``TYPE:COUNT[:CAPACITY]``, as
    ``ANYACCEL_EMULATED`` takes it) installs emulated devices in the worker and makes them its
    accelerator before the target loads (a bad value fails loading, saying why). Raises
    ``ConformanceError`` for unknown checks, for ``simulate`` with ``emulated`` (each installs
    a device runtime: use one), and for targets that cannot be named for another process;
    every fault of the target is in the report.
    """
    if simulate is not None and emulated is not None:
        raise ConformanceError(
            f"simulate={simulate!r} and emulated={emulated!r} each install a device runtime "
            "in the worker; use one"
        )
    reference = import_reference(target)
    if reference is None:
        raise ConformanceError(
            f"{target!r} cannot be imported by a worker process; give it as "
            "'package.module:Class' (a module-level class or factory)"
        )
    context_reference = None if context is None else import_reference(context)
    if context is not None and context_reference is None:
        raise ConformanceError(f"context {context!r} cannot be imported by a worker process")
    if not timeout > 0:
        raise ConformanceError(f"timeout must be a positive number of seconds, not {timeout!r}")
    selected = list(CHECKS) if checks is None else list(checks)
    unknown = [name for name in selected if name not in CHECKS]
    if unknown:
        raise ConformanceError(
            f"unknown check(s) {', '.join(unknown)}; choose from {', '.join(CHECKS)}"
        )
    done: dict[str, CheckResult] = {}
    accelerator = "?"
    remaining = list(selected)
    load_failure: str | None = None
    while remaining and load_failure is None:
        run = _run_worker(reference, remaining, timeout, simulate, context_reference, emulated)
        accelerator = run.accelerator or accelerator
        for result in run.results:
            done[result.name] = result
        remaining = [name for name in remaining if name not in done]
        if run.load_failure is not None:
            load_failure = run.load_failure
        elif run.phase in _DOING:
            doing = _DOING[run.phase]
            load_failure = f"{doing} {run.ending}{run.output}"
        elif run.current is not None:
            message = f"the target {run.ending} during this check{run.output}"
            done[run.current] = CheckResult(run.current, "failed", (message,))
            remaining.remove(run.current)
        elif run.phase != "done" and remaining:
            load_failure = f"the worker {run.ending} between checks{run.output}"
    results = [done[name] for name in selected if name in done]
    if load_failure is not None:
        skipped = [
            CheckResult(name, "skipped", ("not run: the target could not be loaded",))
            for name in selected
            if name not in done
        ]
        results = [CheckResult(LOAD_CHECK, "failed", (load_failure,)), *results, *skipped]
    return ConformanceReport(reference, accelerator, tuple(results))


#: What the worker was doing in a phase before the checks, for a report of its end.
_DOING = {
    "starting": "starting the worker",
    "installing": "installing the emulated devices",
    "loading": "loading the target",
}
#: Deadlines of the phases that do not take ``timeout`` (a check, loading the target).
_PHASE_LIMITS = {"starting": STARTUP_TIMEOUT, "installing": INSTALL_TIMEOUT}


def _run_worker(
    reference: str,
    checks: list[str],
    timeout: float,
    simulate: str | None,
    context: str | None,
    emulated: str | None,
) -> _WorkerRun:
    """One worker over ``checks``: its reports until it finishes, dies or overruns a deadline."""
    from anyaccel.testing.emulated import EMULATED_ENV

    spec = {
        "target": reference,
        "checks": checks,
        "simulate": simulate,
        "context": context,
        "emulated": emulated,
        "sys_path": [entry for entry in sys.path if entry],
    }
    env = dict(os.environ)
    if emulated is not None:  # the emulated device's own door: the worker reads the spec there
        env[EMULATED_ENV] = emulated
    read_end, write_end = os.pipe()
    env["ANYACCEL_CONFORMANCE_FD"] = str(write_end)
    run = _WorkerRun()
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as output:
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "anyaccel.testing.isolation", json.dumps(spec)],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                pass_fds=(write_end,),
                env=env,
                start_new_session=True,  # one process group: a hang is killed with its children
            )
        finally:
            os.close(write_end)
        try:
            _follow(process, read_end, run, timeout)
        finally:
            os.close(read_end)
        if run.phase != "done" and not run.ending:
            run.ending = _exit_description(process.wait())
        if run.phase != "done":
            run.output = _output_excerpt(output)
    return run


def _follow(process: subprocess.Popen[bytes], events: int, run: _WorkerRun, timeout: float) -> None:
    """Read the worker's events into ``run`` until it is done, exits, or overruns a deadline."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    pending = b""
    with selectors.DefaultSelector() as selector:
        selector.register(events, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                limit = _PHASE_LIMITS.get(run.phase, timeout)
                which = "" if run.phase in _PHASE_LIMITS else " (--timeout)"
                _kill(process)
                run.ending = f"did not finish within {limit:g} s{which} and was killed"
                return
            if not selector.select(min(left, 0.5)):
                if process.poll() is not None:  # exited; a child it forked may hold the pipe
                    return
                continue
            chunk = os.read(events, 65536)
            if not chunk:  # the worker's end of the pipe closed: it exited
                return
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                deadline = _apply(json.loads(line), run, deadline, timeout)
                if run.phase == "done":
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        process.wait(timeout=10)
                    _kill(process)
                    return


def _apply(event: dict[str, Any], run: _WorkerRun, deadline: float, timeout: float) -> float:
    """Record one worker event in ``run``; returns the deadline for the step now running."""
    kind = event.pop("event")
    if kind == "installing":
        run.phase, deadline = "installing", time.monotonic() + INSTALL_TIMEOUT
    elif kind == "loading":
        run.phase, deadline = "loading", time.monotonic() + timeout
    elif kind == "load_failed":
        run.load_failure = event["message"]
    elif kind == "loaded":
        run.phase, run.accelerator = "checking", event["accelerator"]
    elif kind == "start":
        run.current, deadline = event["check"], time.monotonic() + timeout
    elif kind == "result":
        event["messages"] = tuple(event["messages"])
        run.results.append(CheckResult(**event))
        run.current = None
    elif kind == "done":
        run.phase = "done"
    return deadline


def _kill(process: subprocess.Popen[bytes]) -> None:
    """Kill the worker and whatever it started (its own process group), then reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _exit_description(returncode: int) -> str:
    """How the worker ended, in words: a signal by name, or its exit status."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed the worker process ({name})"
    return f"ended the worker process with exit status {returncode} (sys.exit or os._exit)"


def _output_excerpt(output: IO[str], lines: int = 6) -> str:
    """What the worker printed before it stopped: a crash's error and innermost frames.

    faulthandler prints ``Fatal Python error: ...`` then the stack, innermost call first;
    without it, the last lines.
    """
    output.flush()
    output.seek(0)
    text = [line.strip() for line in output.read().splitlines() if line.strip()]
    fatal = next((i for i, line in enumerate(text) if line.startswith("Fatal Python error")), None)
    if fatal is not None:
        frames = [line for line in text[fatal + 1 :] if line.startswith("File ")]
        excerpt = [text[fatal], *frames[:lines]]
    else:
        excerpt = text[-lines:]
    return "; output: " + " | ".join(excerpt) if excerpt else ""


# ---------------------------------------------------------------------- the worker
def _resolve(reference: str) -> Any:
    """The object ``"module:qualname"`` names."""
    module_name, _, qualname = reference.partition(":")
    found: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


@contextlib.contextmanager
def _worker_context(simulate: str | None, context: str | None) -> Iterator[None]:
    """The simulated runtime and the caller's context, entered around the target's whole life."""
    with contextlib.ExitStack() as stack:
        if simulate is not None:
            from anyaccel.testing import simulated

            stack.enter_context(getattr(simulated, f"simulate_{simulate}")())
        if context is not None:
            stack.enter_context(_resolve(context)())
        yield


def _install_emulated(value: str) -> None:
    """Install the emulated devices ``ANYACCEL_EMULATED`` names and make them the accelerator.

    The parent put ``value`` there; a bad value or a device that cannot be installed here is a
    ``ConformanceError`` naming it, reported as the target's load failure.
    """
    from anyaccel import reset_accelerator, set_accelerator
    from anyaccel.testing.emulated import EmulatedAccelerator

    try:  # installed here, not under detection's time limit: a first use builds the device
        accelerator = EmulatedAccelerator()
    except Exception as error:
        raise ConformanceError(
            describe_exception(error, f"installing the emulated devices {value!r}")
        ) from error
    reset_accelerator()
    set_accelerator(accelerator)


def _worker(spec: dict[str, Any], events: IO[str]) -> None:
    """Load the target and run each check, reporting every step on ``events``."""
    import faulthandler
    import warnings

    faulthandler.enable()  # a crash prints the Python stack into the output the parent keeps
    warnings.simplefilter("ignore")

    def send(**event: Any) -> None:
        events.write(json.dumps(event) + "\n")
        events.flush()

    sys.path[:0] = [entry for entry in spec["sys_path"] if entry not in sys.path]
    from anyaccel.testing.conformance import load_accelerator, prepare, run_check

    prepare(compile_backend="compile_backend" in spec["checks"])
    with _worker_context(spec["simulate"], spec["context"]):
        if spec["emulated"] is not None:
            send(event="installing")
            try:
                _install_emulated(spec["emulated"])
            except ConformanceError as error:
                send(event="load_failed", message=str(error))
                return
        send(event="loading")
        try:
            accelerator, _ = load_accelerator(spec["target"])
            name = getattr(accelerator, "_name", "?")
        except ConformanceError as error:
            send(event="load_failed", message=str(error))
            return
        except BaseException as error:  # sys.exit in the target, too
            send(event="load_failed", message=describe_exception(error, "loading the target"))
            return
        send(event="loaded", accelerator=name if isinstance(name, str) else repr(type(name)))
        for check in spec["checks"]:
            send(event="start", check=check)
            send(event="result", **asdict(run_check(accelerator, check)))
        send(event="done")


def main() -> None:
    """Worker entry point: the spec is argv[1], events go to ``ANYACCEL_CONFORMANCE_FD``."""
    spec = json.loads(sys.argv[1])
    with os.fdopen(int(os.environ["ANYACCEL_CONFORMANCE_FD"]), "w", encoding="utf-8") as events:
        _worker(spec, events)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the target's threads and atexit hooks must not keep the worker alive


if __name__ == "__main__":
    main()
