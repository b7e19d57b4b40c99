"""The conformance kit survives the target it tests: exits, crashes, hangs and raising imports.

Each case is a real module written to a temporary directory and checked by ``anyaccel
conformance`` in a subprocess with a timeout; all the runs start at once and the tests read
their reports.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from anyaccel.testing.conformance import ConformanceError
from anyaccel.testing.isolation import import_reference, run_isolated

pytestmark = pytest.mark.filterwarnings("ignore::anyaccel.errors.CpuFallbackWarning")

pytest_plugins = ["pytester"]

TARGETS = {
    "faulty_methods.py": """
        import ctypes, os, sys, time
        from anyaccel.backends.cpu import CpuAccelerator

        class Unprintable:
            def __repr__(self):
                raise RuntimeError("repr is broken")

        class ManyFaults(CpuAccelerator):
            def device_count(self):                           # return_types
                sys.exit(0)
            def get_rng_state(self, device_index=None):       # rng_state
                time.sleep(600)
            def memory_allocated(self, device_index=None):    # memory
                ctypes.string_at(0)
            def visible_devices_envs(self):                   # visible_devices
                os._exit(3)

        class BadRepr(CpuAccelerator):
            def __repr__(self):
                raise RuntimeError("repr is broken")
            def device(self, device_index=None):
                return Unprintable()

        class InitRaises(CpuAccelerator):
            def __init__(self):
                raise KeyError("no device 0")
        """,
    "exit_at_import.py": "import sys\nsys.exit(0)\n",
    "segfault_at_import.py": "import ctypes\nctypes.string_at(0)\n",
    "hang_at_import.py": "import time\ntime.sleep(600)\n",
    "raise_at_import.py": "raise ValueError('bad vendor config')\n",
}


def _checks(*names: str) -> list[str]:
    return [argument for name in names for argument in ("--check", name)]


#: name -> (target, extra arguments)
RUNS: dict[str, tuple[str, list[str]]] = {
    "many_faults": (
        "faulty_methods:ManyFaults",
        [
            "--timeout=15",  # a hang costs this; generous for a loaded machine
            *_checks("contract_members", "return_types", "rng_state", "memory"),
            *_checks("visible_devices", "op_builders"),
        ],
    ),
    "bad_repr": ("faulty_methods:BadRepr", _checks("device_strings", "memory")),
    "init_raises": ("faulty_methods:InitRaises", _checks("memory")),
    "exit_at_import": ("exit_at_import:Acc", _checks("memory")),
    "segfault_at_import": ("segfault_at_import:Acc", _checks("memory")),
    "hang_at_import": ("hang_at_import:Acc", ["--timeout=8", *_checks("memory")]),
    "raise_at_import": ("raise_at_import:Acc", ["--json", *_checks("memory")]),
}


class Run(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    """Every run of ``RUNS``, started at once, each in its own ``anyaccel conformance`` process."""
    directory = tmp_path_factory.mktemp("targets")
    for name, code in TARGETS.items():
        (directory / name).write_text(textwrap.dedent(code))
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(directory), src])}
    env.pop("DS_ACCELERATOR", None)
    processes = {
        name: subprocess.Popen(
            [sys.executable, "-m", "anyaccel", "conformance", target, *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name, (target, extra) in RUNS.items()
    }
    results: dict[str, Run] = {}
    try:
        for name, process in processes.items():
            out, err = process.communicate(timeout=600)
            results[name] = Run(process.returncode, out, err)
        yield results
    finally:
        for process in processes.values():
            process.kill()


def _block(stdout: str, check: str) -> str:
    """The report's lines for ``check``: its status line and the messages below it."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[1:2] == [check])
    block = [lines[start]]
    block += [line for line in lines[start + 1 :] if line.startswith("          -")][:1]
    return "\n".join(block)


def test_sys_exit_in_a_method_fails_that_check(runs: dict[str, Run]) -> None:
    block = _block(runs["many_faults"].stdout, "return_types")
    assert "FAILED" in block and "the target called sys.exit(0)" in block


def test_a_hang_fails_its_check_after_the_timeout(runs: dict[str, Run]) -> None:
    block = _block(runs["many_faults"].stdout, "rng_state")
    assert "FAILED" in block and "did not finish within 15 s (--timeout)" in block


def test_a_segfault_fails_its_check_and_names_the_signal_and_frame(runs: dict[str, Run]) -> None:
    block = _block(runs["many_faults"].stdout, "memory")
    assert "FAILED" in block and "killed the worker process (SIGSEGV) during this check" in block
    assert "in memory_allocated" in block  # the crashing frame, from faulthandler


def test_os_exit_in_a_method_fails_that_check(runs: dict[str, Run]) -> None:
    block = _block(runs["many_faults"].stdout, "visible_devices")
    assert "FAILED" in block and "exit status 3" in block


def test_the_other_checks_still_run_and_the_exit_status_is_one(runs: dict[str, Run]) -> None:
    run = runs["many_faults"]
    assert run.returncode == 1, run.stderr[-2000:]
    assert "PASSED  contract_members" in run.stdout and "PASSED  op_builders" in run.stdout
    assert run.stdout.splitlines()[-1] == "2 passed, 4 failed, 0 skipped"


def test_an_exception_from_a_repr_is_a_failed_check_with_type_and_message(
    runs: dict[str, Run],
) -> None:
    run = runs["bad_repr"]
    assert run.returncode == 1, run.stderr[-2000:]
    assert "RuntimeError: repr is broken" in _block(run.stdout, "device_strings")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("init_raises", "creating faulty_methods:InitRaises raised KeyError: 'no device 0'"),
        ("exit_at_import", "importing 'exit_at_import' called sys.exit(0)"),
        ("segfault_at_import", "loading the target killed the worker process (SIGSEGV)"),
        ("hang_at_import", "loading the target did not finish within 8 s (--timeout)"),
    ],
)
def test_a_target_that_cannot_be_loaded_is_reported_and_exits_two(
    runs: dict[str, Run], name: str, message: str
) -> None:
    run = runs[name]
    assert run.returncode == 2, run.stderr[-2000:]
    assert "FAILED  load" in run.stdout and message in run.stdout  # the report is printed
    assert message in run.stderr
    assert (
        "SKIPPED memory" in run.stdout and "not run: the target could not be loaded" in run.stdout
    )


def test_any_exception_at_import_is_reported_in_json_too(runs: dict[str, Run]) -> None:
    import json

    run = runs["raise_at_import"]
    assert run.returncode == 2
    report = json.loads(run.stdout)
    assert report["passed"] is False
    load = report["results"][0]
    assert load["name"] == "load" and load["status"] == "failed"
    assert load["messages"] == ["importing 'raise_at_import' raised ValueError: bad vendor config"]


# ---------------------------------------------------------------- naming targets for workers
class ModuleLevel:
    class Nested:
        pass


def test_import_reference_names_module_level_objects_only() -> None:
    here = __name__
    assert import_reference("pkg.mod:Cls") == "pkg.mod:Cls"
    assert import_reference(ModuleLevel) == f"{here}:ModuleLevel"
    assert import_reference(ModuleLevel.Nested) == f"{here}:ModuleLevel.Nested"
    assert import_reference(lambda: None) is None

    class Local:
        pass

    assert import_reference(Local) is None
    assert import_reference(ModuleLevel()) is None


def test_run_isolated_refuses_what_a_worker_cannot_import_and_unknown_checks() -> None:
    with pytest.raises(ConformanceError, match="cannot be imported by a worker"):
        run_isolated(lambda: None)
    with pytest.raises(ConformanceError, match="choose from contract_members"):
        run_isolated("anyaccel.backends.cpu:CpuAccelerator", ["speed"])
    with pytest.raises(ConformanceError, match="positive number of seconds"):
        run_isolated("anyaccel.backends.cpu:CpuAccelerator", timeout=0)


def test_pytest_plugin_survives_a_crashing_target(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_crashing_vendor="""
        import ctypes
        from anyaccel.backends.cpu import CpuAccelerator
        from anyaccel.testing.pytest_plugin import conformance_tests

        class Crashes(CpuAccelerator):
            def memory_allocated(self, device_index=None):
                ctypes.string_at(0)

        test_crashes = conformance_tests(Crashes, checks=["memory", "visible_devices"])
        """
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", timeout=600)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["memory:", "*killed the worker process (SIGSEGV) during this check*"]
    )
