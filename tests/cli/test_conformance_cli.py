"""``anyaccel conformance``: the kit from the command line, with an exit status CI can use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from anyaccel.cli import main
from anyaccel.testing.conformance import CHECKS
from anyaccel.testing.emulated import MINIMUM_TORCH

pytestmark = pytest.mark.filterwarnings("ignore::anyaccel.errors.CpuFallbackWarning")


def test_passing_accelerator_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "anyaccel.backends.cpu:CpuAccelerator"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"{len(CHECKS)} passed, 0 failed, 0 skipped"


def test_failing_accelerator_exits_one_and_says_why(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "low_peak_accel.py"
    module.write_text(
        "from anyaccel.backends.cpu import CpuAccelerator\n"
        "class LowPeak(CpuAccelerator):\n"
        "    def max_memory_allocated(self, device_index=None):\n"
        "        return 0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["conformance", "low_peak_accel:LowPeak", "--check", "memory"]) == 1
    out = capsys.readouterr().out
    assert "FAILED  memory" in out
    assert "max_memory_allocated() = 0 is below memory_allocated()" in out


def test_json_report(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["conformance", "anyaccel.backends.cpu:CpuAccelerator", "--json", "--check",
                 "visible_devices"])  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["passed"] is True
    assert [r["name"] for r in data["results"]] == ["visible_devices"]


def test_simulated_runtime(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["conformance", "anyaccel.backends.cuda:CudaAccelerator", "--simulate", "cuda"])
    assert code == 0, capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["no_such_mod_xyz:Acc"], "cannot import 'no_such_mod_xyz'"),
        (["anyaccel.backends.cpu"], "not of the form 'package.module:Class'"),
        (["anyaccel.backends.cpu:CpuAccelerator", "--simulate", "quantum"], "choose from"),
    ],
)
def test_unusable_target_exits_two(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["conformance", *argv]) == 2
    assert message in capsys.readouterr().err


def test_list_names_every_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == list(CHECKS)


def test_context_runs_the_checks_inside_a_vendor_runtime_and_zero_devices_is_said(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "zero_boards.py").write_text(
        "from anyaccel.testing.simulated import simulate_npu\n"
        "def simulate():\n"
        "    return simulate_npu(device_count=0)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", path)  # the worker process imports it too
    argv = ["conformance", "anyaccel.backends.npu:NpuAccelerator", "--context",
            "zero_boards:simulate", "--check", "contract_members", "--check", "rng_state",
            "--check", "return_types"]  # fmt: skip
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    assert lines[1].startswith("NO DEVICE: no device was exercised: device_count() is 0"), out
    assert "SKIPPED rng_state" in out and "SKIPPED return_types" in out
    assert "PASSED  contract_members" in out
    assert "IndexError" not in out


def test_a_context_that_cannot_be_found_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["conformance", "anyaccel.backends.cpu:CpuAccelerator", "--context", "nowhere_xyz:sim"]
    assert main(argv) == 2
    assert "no module 'nowhere_xyz' can be imported here" in capsys.readouterr().err


# ---------------------------------------------------------------- the real command, as users run it
SOURCE = Path(__file__).resolve().parents[2] / "src"

#: The emulated device needs a torch whose PrivateUse1 interfaces its native core is built on.
needs_emulated_device = pytest.mark.skipif(
    tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2]) < MINIMUM_TORCH,
    reason=f"the emulated device needs torch >= {MINIMUM_TORCH[0]}.{MINIMUM_TORCH[1]}",
)


def _conformance(
    *argv: str, env: dict[str, str] | None = None, path: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m anyaccel conformance ARGV`` in a fresh process, no accelerator chosen yet."""
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DS_ACCELERATOR", "ANYACCEL_EMULATED", "ANYACCEL_SIMULATED")
    }
    extra = [str(path)] if path is not None else []
    environ["PYTHONPATH"] = os.pathsep.join([str(SOURCE), *extra, environ.get("PYTHONPATH", "")])
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "anyaccel", "conformance", *argv],
        capture_output=True,
        text=True,
        env=environ,
        timeout=900,
    )


def test_without_a_target_the_accelerator_ds_accelerator_names_is_checked() -> None:
    done = _conformance("--json", "--check", "contract_members", env={"DS_ACCELERATOR": "cpu"})
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert (report["target"], report["accelerator"]) == ("anyaccel:get_accelerator", "cpu")
    assert report["passed"] is True


def test_without_a_target_detection_picks_as_it_would_in_this_process() -> None:
    # Inside the simulated CUDA runtime detection finds a GPU: the check follows the pick.
    done = _conformance("--simulate", "cuda", "--check", "contract_members")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == (
        "conformance of anyaccel:get_accelerator (accelerator 'cuda')"
    )


def test_without_a_target_a_bad_ds_accelerator_exits_two_naming_it() -> None:
    done = _conformance("--check", "contract_members", env={"DS_ACCELERATOR": "quantum"})
    assert done.returncode == 2
    assert "DS_ACCELERATOR='quantum' is not a known accelerator" in done.stderr


def test_a_target_that_is_no_accelerator_is_refused_once_saying_what_it_is() -> None:
    done = _conformance("os:sep")
    assert done.returncode == 2
    said = f"os:sep is {os.sep!r} (type str), not an accelerator"
    assert done.stderr.count(said) == 1 and done.stdout.count(said) == 1, done.stderr
    assert "anyaccel.Accelerator subclass" in done.stderr
    assert "AttributeError" not in done.stdout + done.stderr
    assert "FAILED  contract_members" not in done.stdout  # no check ran against a str


def test_a_factory_returning_no_accelerator_is_refused_naming_what_it_returned() -> None:
    done = _conformance("os:getcwd", "--check", "contract_members")
    assert done.returncode == 2
    assert "os:getcwd() returned '" in done.stderr and "(type str), not an accelerator" in (
        done.stderr
    )


@needs_emulated_device
def test_emulated_devices_are_the_accelerator_checked_without_a_target() -> None:
    checks = ["contract_members", "device_strings", "memory", "tensor_types"]
    done = _conformance("--emulated", "npu:2", "--json", *(f"--check={c}" for c in checks))
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["accelerator"] == "npu" and report["no_device"] is None
    assert [(r["name"], r["status"]) for r in report["results"]] == [(c, "passed") for c in checks]


#: A vendor's first accelerator class: torch's device module for its type does the work.
_XYZ_PLUGIN = """
from anyaccel.backends.torch_module import TorchModuleAccelerator


class XyzAccelerator(TorchModuleAccelerator):
    _name = "xyz"
    visible_devices_env_names = ("XYZ_VISIBLE_DEVICES",)
"""


@needs_emulated_device
def test_a_target_runs_on_emulated_devices_of_its_type(tmp_path: Path) -> None:
    (tmp_path / "xyz_accel.py").write_text(_XYZ_PLUGIN)
    done = _conformance("xyz_accel:XyzAccelerator", "--emulated", "xyz:2", path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        done.stdout.splitlines()[0] == "conformance of xyz_accel:XyzAccelerator (accelerator 'xyz')"
    )
    assert done.stdout.splitlines()[-1] == f"{len(CHECKS)} passed, 0 failed, 0 skipped"
    # Without the emulated devices torch.xyz does not exist: the same target cannot load.
    bare = _conformance("xyz_accel:XyzAccelerator", "--check", "contract_members", path=tmp_path)
    assert bare.returncode == 2 and "the device module torch.xyz" in bare.stderr


def test_a_bad_emulated_spec_exits_two_naming_it() -> None:
    done = _conformance("--emulated", "npu:two", "--check", "contract_members")
    assert done.returncode == 2
    assert "installing the emulated devices 'npu:two'" in done.stderr
    assert "ANYACCEL_EMULATED='npu:two' is not valid" in done.stderr


def test_emulated_and_simulate_together_are_refused() -> None:
    done = _conformance("--emulated", "npu:2", "--simulate", "npu")
    assert done.returncode == 2
    assert "each install a device runtime in the worker; use one" in done.stderr
