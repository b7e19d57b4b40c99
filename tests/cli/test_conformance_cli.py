"""``anyaccel conformance``: the kit from the command line, with an exit status CI can use."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from anyaccel.cli import main
from anyaccel.testing.conformance import CHECKS

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
        ([], "give the accelerator as package.module:Class"),
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
