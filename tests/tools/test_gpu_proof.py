"""tools/gpu_proof.py without a GPU: its verdicts, its report, and its no-GPU exit (status 3)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PROOF = REPO / "tools" / "gpu_proof.py"


@pytest.fixture(scope="module")
def proof() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_proof", PROOF)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_proof"] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def run_proof(*args: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it, with every GPU hidden (so it means the same anywhere)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # it finds src itself
    env["CUDA_VISIBLE_DEVICES"] = ""
    return subprocess.run(
        [sys.executable, str(PROOF), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )


def test_without_a_gpu_it_says_so_writes_the_report_and_exits_3(tmp_path: Path) -> None:
    done = run_proof("--out", str(tmp_path / "out"))
    assert done.returncode == 3, done.stdout + done.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["exit_status"] == 3
    assert report["gpu"]["devices"] == []
    assert "no CUDA device" in report["gpu"]["problem"] or "CPU-only" in report["gpu"]["problem"]
    assert "tests" not in report and "benchmark" not in report  # nothing ran, nothing claimed
    assert report["anyaccel"]["path"] == str(REPO / "src" / "anyaccel")
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert markdown.startswith("# anyaccel GPU proof: NO GPU: nothing proven\n")
    assert "- GPU: none" in markdown
    assert "NO GPU: nothing proven" in done.stdout


def test_a_bad_timeout_is_refused_before_anything_runs(tmp_path: Path) -> None:
    done = run_proof("--out", str(tmp_path / "out"), "--timeout", "0")
    assert done.returncode == 2
    assert "--timeout must be positive, got 0" in done.stderr
    assert not (tmp_path / "out").exists()


JUNIT = """\
<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="gpu.test_a" name="test_ok" time="1.5"/>
<testcase classname="gpu.test_a" name="test_bad" time="0.5">
  <failure message="assert 1 == 2">long traceback</failure></testcase>
<testcase classname="gpu.test_b" name="test_broken" time="0.1">
  <error message="fixture failed">trace</error></testcase>
<testcase classname="gpu.test_b" name="test_skip" time="0">
  <skipped type="pytest.skip" message="deepspeed not importable here">skip</skipped></testcase>
</testsuite></testsuites>
"""


def test_junit_results_are_counted_with_messages(proof: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    counts = proof.parse_junit(path)
    assert (counts.passed, counts.failed, counts.errors, counts.skipped) == (1, 1, 1, 1)
    assert counts.total == 4 and counts.seconds == pytest.approx(2.1)
    assert counts.failures[0] == {
        "test": "gpu.test_a::test_bad",
        "kind": "failure",
        "message": "assert 1 == 2",
    }
    assert counts.failures[1]["kind"] == "error"
    assert counts.skips == [
        {"test": "gpu.test_b::test_skip", "reason": "deepspeed not importable here"}
    ]


def base_report(**changes: Any) -> dict[str, Any]:
    report: dict[str, Any] = {
        "started": "2026-01-01T00:00:00+00:00",
        "seconds": 12.0,
        "anyaccel": {"version": "0.1.0", "path": "/src/anyaccel", "commit": "abc"},
        "python": "3.11.7",
        "platform": "Linux",
        "gpu": {
            "torch": "2.11.0+cu130",
            "torch_cuda": "13.0",
            "problem": None,
            "devices": [
                {"index": 0, "name": "NVIDIA H100", "capability": "9.0", "total_memory": 2**36}
            ],
        },
        "driver": "580.65.06",
        "nvcc": "13.0",
        "packages": {"torch": "2.11.0", "deepspeed": None},
        "tests": {
            "passed": 3,
            "failed": 0,
            "errors": 0,
            "skipped": 1,
            "seconds": 9.0,
            "failures": [],
            "skips": [{"test": "t::ds", "reason": "deepspeed not importable"}],
        },
        "benchmark": {"tables": "# Hot calls\n| call | ratio |", "figures": {}},
        "cli_report": {"accelerator": "cuda"},
    }
    report.update(changes)
    return report


def test_verdict_passes_a_clean_run_with_framework_skips(proof: ModuleType) -> None:
    assert proof.verdict(base_report()) == (0, [])


def test_verdict_fails_on_failures_errors_and_missing_steps(proof: ModuleType) -> None:
    failing = base_report()
    failing["tests"] = dict(failing["tests"], failed=1, errors=2)
    assert proof.verdict(failing) == (1, ["1 test(s) failed, 2 error(s)"])
    no_pytest = base_report(tests={"problem": "pytest is not installed for this interpreter"})
    assert proof.verdict(no_pytest)[0] == 1
    broken_bench = base_report(benchmark={"problem": "exit 1: boom"})
    assert proof.verdict(broken_bench) == (1, ["benchmark: exit 1: boom"])
    wrong_backend = base_report(cli_report={"problem": "anyaccel chose 'cpu', not 'cuda'"})
    assert proof.verdict(wrong_backend)[0] == 1


def test_verdict_fails_a_suite_that_skipped_for_want_of_a_gpu(proof: ModuleType) -> None:
    report = base_report()
    report["tests"] = dict(
        report["tests"],
        skips=[{"test": "t::x", "reason": "needs an NVIDIA GPU (torch sees none)"}],
    )
    assert proof.verdict(report) == (1, ["1 test(s) skipped as if there were no GPU"])
    report["tests"] = dict(report["tests"], passed=0)
    assert "no GPU test passed" in proof.verdict(report)[1]


def test_verdict_without_a_gpu_is_status_3(proof: ModuleType) -> None:
    report = base_report()
    report["gpu"] = dict(report["gpu"], problem="torch is a CPU-only build", devices=[])
    assert proof.verdict(report) == (3, ["no CUDA device: torch is a CPU-only build"])


def test_markdown_names_machine_versions_counts_and_figures(proof: ModuleType) -> None:
    report = base_report()
    report["tests"] = dict(
        report["tests"],
        failed=1,
        failures=[{"test": "t::bad", "kind": "failure", "message": "assert 1 == 2\nmore"}],
    )
    text = proof.render_markdown(report)
    assert text.startswith("# anyaccel GPU proof: FAILED\n")
    for expected in (
        "GPU 0: NVIDIA H100, compute capability 9.0, 64.0 GiB",
        "torch 2.11.0+cu130 (CUDA 13.0), driver 580.65.06, nvcc 13.0",
        "3 passed, 1 failed, 0 errors, 1 skipped in 9 s",
        "- FAILURE t::bad: assert 1 == 2",
        "- skipped t::ds: deepspeed not importable",
        "not installed: deepspeed",
        "| call | ratio |",
    ):
        assert expected in text
    assert proof.render_markdown(base_report()).startswith("# anyaccel GPU proof: PASSED\n")


def test_write_report_writes_both_files(proof: ModuleType, tmp_path: Path) -> None:
    proof.write_report(base_report(), tmp_path / "new")
    assert json.loads((tmp_path / "new" / "report.json").read_text())["driver"] == "580.65.06"
    assert "PASSED" in (tmp_path / "new" / "report.md").read_text()


@pytest.mark.parametrize(
    ("text", "version"),
    [
        (
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 2024"
            "\nGCC version:  gcc version 12.2.0",
            "550.54.15",
        ),
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build",
            "580.65.06",
        ),
        (
            "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |",
            "535.104.05",
        ),
        ("570.86.15\n", "570.86.15"),
        ("no driver here", None),
    ],
)
def test_driver_version_is_read_from_proc_or_nvidia_smi(
    proof: ModuleType, text: str, version: str | None
) -> None:
    assert proof.parse_driver_version(text) == version


def test_nvcc_version_is_the_release(proof: ModuleType) -> None:
    output = textwrap.dedent(
        """\
        nvcc: NVIDIA (R) Cuda compiler driver
        Cuda compilation tools, release 13.0, V13.0.88
        Build cuda_13.0.r13.0/compiler.36424714_0
        """
    )
    assert proof.parse_nvcc_version(output) == "13.0"
    assert proof.parse_nvcc_version("") is None
