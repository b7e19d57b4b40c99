"""The emulated device's one package: its doors, its import-light root, each fact defined once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from anyaccel.emulated import accelerator, collectives, native_builders, spec
from anyaccel.emulated.state import torch_problem
from anyaccel.registry import BUILTIN_CANDIDATES

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "anyaccel" / "emulated"

#: The emulated device needs a torch whose PrivateUse1 interfaces its native core is built on.
needs_emulated_device = pytest.mark.skipif(torch_problem() is not None, reason=str(torch_problem()))


def test_the_documented_doors_re_export_the_same_objects() -> None:
    from anyaccel.backends import emulated as backend_door
    from anyaccel.distributed import emulated as distributed_door
    from anyaccel.ops.cpu import HostViewBackendBuilder
    from anyaccel.testing import emulated as testing_door

    assert backend_door.EmulatedAccelerator is accelerator.EmulatedAccelerator
    assert backend_door.probe is accelerator.probe
    assert distributed_door.create_backend is collectives.create_backend
    assert testing_door.install is accelerator.install
    assert testing_door.EmulatedAccelerator is accelerator.EmulatedAccelerator
    assert HostViewBackendBuilder is native_builders.HostViewBackendBuilder


def test_the_registry_names_the_accelerator_where_it_lives() -> None:
    (candidate,) = [c for c in BUILTIN_CANDIDATES if c.name == "emulated"]
    assert candidate.accelerator == "anyaccel.emulated.accelerator:EmulatedAccelerator"
    assert candidate.probe == "anyaccel.emulated.accelerator:probe"


def test_importing_the_package_loads_none_of_its_parts() -> None:
    script = (
        "import sys, anyaccel.emulated\n"
        "print(sorted(m for m in sys.modules if m.startswith('anyaccel')))"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == repr(["anyaccel", "anyaccel.emulated"])


def test_the_device_table_size_is_defined_once_and_passed_to_the_build() -> None:
    assert f"-DANYACCEL_EMULATED_MAX_DEVICES={spec.MAX_DEVICES}" in (
        native_builders.EmulatedDeviceBuilder().cxx_args()
    )
    sources = "".join(path.read_text() for path in sorted((PACKAGE / "csrc").iterdir()))
    assert "kMaxDevices = ANYACCEL_EMULATED_MAX_DEVICES;" in sources
    assert f"kMaxDevices = {spec.MAX_DEVICES}" not in sources


def test_every_header_of_the_core_enters_its_build_hash() -> None:
    headers = {Path(path).name for path in native_builders.EmulatedDeviceBuilder().depends()}
    assert headers == {path.name for path in (PACKAGE / "csrc").glob("*.h")}
    assert {"allocator.h", "generator.h", "guard.h", "hooks.h", "fallback.h"} <= headers


@needs_emulated_device
def test_entering_another_simulation_is_refused_by_the_one_rule() -> None:
    code = textwrap.dedent(
        """
        from anyaccel.emulated.vendors.processes import enter_for_process
        from anyaccel.emulated.state import EmulatedDeviceError
        enter_for_process("npu:2")
        enter_for_process("npu")  # the same devices: nothing to do
        try:
            enter_for_process("mlu:2")
        except EmulatedDeviceError as error:
            print("REFUSED", error)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("DS_ACCELERATOR", None)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "REFUSED this process already installed the emulated device as" in done.stdout
    assert "torch names PrivateUse1 once per process" in done.stdout


@pytest.mark.parametrize(
    "module",
    ["anyaccel.emulated.vendors.modules", "anyaccel.emulated.vendors.processes"],
)
def test_a_vendor_module_imports_first_in_a_fresh_interpreter(module: str) -> None:
    # it builds on anyaccel.testing.simulated, whose vendor modules import it back lazily
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run(
        [sys.executable, "-c", f"import {module}, anyaccel.testing.simulated"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
