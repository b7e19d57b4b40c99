"""The environment part of ``anyaccel report``: complete, versioned, and it initialises nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from anyaccel.cli.environment import (
    SCHEMA_VERSION,
    environment_report,
    format_environment,
    format_markdown,
    torch_build,
    vendor_packages,
)
from anyaccel.testing.simulated import simulate_cuda

SRC = Path(__file__).resolve().parents[2] / "src"


def run_report(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    full_env.update(PYTHONPATH=str(SRC), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "anyaccel", "report", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=180,
    )


def test_json_report_carries_the_versioned_environment() -> None:
    result = run_report("--json", env={"ANYACCEL_CPU_SIMD": "generic", "DS_ACCELERATOR": "cpu"})
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["schema_version"] == SCHEMA_VERSION
    environment = data["environment"]
    assert environment["torch"]["version"] == torch.__version__
    assert environment["torch"]["path"] == os.path.dirname(torch.__file__)
    assert environment["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert environment["cpu"]["simd_selected"] == "generic"
    assert environment["cpu"]["ram_bytes"] > 0
    assert environment["environment_variables"]["DS_ACCELERATOR"] == "cpu"
    assert environment["environment_variables"]["ANYACCEL_CPU_SIMD"] == "generic"
    assert "CUDA_VISIBLE_DEVICES" in environment["environment_variables"]
    assert environment["devices"][0]["dtypes"][0] == "float32"
    assert {op["builder"] for op in environment["ops"]} >= {"CPUAdamBuilder"}


def test_text_and_markdown_forms() -> None:
    text = run_report(env={"DS_ACCELERATOR": "cpu"})
    assert text.returncode == 0, text.stderr
    assert re.search(rf"^torch\s+{re.escape(torch.__version__)}, ", text.stdout, re.M)
    assert re.search(r"^vendor packages\s+", text.stdout, re.M)
    markdown = run_report("--markdown", env={"DS_ACCELERATOR": "cpu"})
    assert markdown.stdout.startswith("<details><summary>anyaccel report</summary>")
    assert f"| torch | {torch.__version__}, " in markdown.stdout
    assert "chosen by: DS_ACCELERATOR=cpu" in markdown.stdout
    assert markdown.stdout.rstrip().endswith("</details>")


@pytest.mark.parametrize(
    ("cuda", "hip", "expected"),
    [(None, None, "CPU"), ("12.4", None, "CUDA 12.4"), ("6.1.40093", "6.1.40093", "ROCm 6.1")],
)
def test_torch_build_names_cpu_cuda_and_rocm(
    cuda: str | None, hip: str | None, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.version, "cuda", cuda)
    monkeypatch.setattr(torch.version, "hip", hip, raising=False)
    assert torch_build() == expected


def test_collecting_initialises_no_device_and_starts_no_subprocess(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_subprocess(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"subprocess started: {args}")

    with simulate_cuda(device_count=2) as cuda:
        from anyaccel.backends.cuda import CudaAccelerator

        accelerator = CudaAccelerator()
        monkeypatch.setattr(subprocess.Popen, "__init__", no_subprocess)
        data = environment_report(accelerator)
        monkeypatch.undo()
        assert cuda.initialized is False, cuda.calls
    assert data["torch"]["build"] == "CUDA 12.4"
    assert data["devices"] == [{"index": 0, "queried": False}, {"index": 1, "queried": False}]
    assert "not queried" in format_environment(data)


def test_devices_flag_asks_each_device() -> None:
    with simulate_cuda(device_count=2, total_memory=8 * 2**30):
        from anyaccel.backends.cuda import CudaAccelerator

        data = environment_report(CudaAccelerator(), devices=True)
    assert [d["total_memory"] for d in data["devices"]] == [8 * 2**30, 8 * 2**30]
    assert "float16" in data["devices"][0]["dtypes"]


def test_vendor_packages_come_from_metadata_without_importing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "torch_npu"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('imported!')\n")
    info = tmp_path / "torch_npu-9.9.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_npu\nVersion: 9.9.1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = {p["module"]: p["version"] for p in vendor_packages()}
    assert found["torch_npu"] == "9.9.1"
    assert "torch_npu" not in sys.modules


def test_a_failing_probe_shows_as_an_error_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    import anyaccel.cli.environment as environment

    def broken() -> str:
        raise OSError("no /proc here")

    monkeypatch.setattr(environment, "_cpu_model", broken)
    data = environment_report(None)
    assert data["cpu"]["model"] == {"error": "OSError: no /proc here"}
    assert "no /proc here" in format_markdown(data)


def test_the_whole_report_initialises_no_simulated_gpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from anyaccel.cli import main

    with simulate_cuda(device_count=2) as cuda:
        monkeypatch.setenv("DS_ACCELERATOR", "cuda")
        status = main(["report", "--json"])
        assert cuda.initialized is False, cuda.calls
    assert status == 0
    data = json.loads(capsys.readouterr().out)
    assert data["accelerator"]["name"] == "cuda" and data["accelerator"]["device_count"] == 2
    assert data["accelerator"]["total_memory"].startswith("not queried")
    assert len(data["environment"]["devices"]) == 2


def test_devices_flag_fills_in_the_summary(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from anyaccel.cli import main

    with simulate_cuda(device_count=1, total_memory=4 * 2**30):
        monkeypatch.setenv("DS_ACCELERATOR", "cuda")
        assert main(["report", "--json", "--devices"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["accelerator"]["total_memory"] == 4 * 2**30
    assert data["environment"]["devices"][0]["total_memory"] == 4 * 2**30


class _EveryMethodRaises:
    """An accelerator whose every method raises, as a broken vendor runtime's can."""

    def __getattr__(self, name: str) -> Any:
        def method(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"driver gone in {name}")

        return method


@pytest.mark.parametrize("devices", [False, True])
def test_an_accelerator_whose_methods_raise_shows_errors_in_their_rows(devices: bool) -> None:
    data = environment_report(_EveryMethodRaises(), devices=devices)
    text = format_environment(data)
    assert "devices" in text and "error: RuntimeError: driver gone in" in text
    assert "\nerror " not in text  # an error answer is not taken for a variable name
    assert "driver gone" in format_markdown(data)
    json.dumps(data, default=str)


_DRIVER_TEXT = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
    "(dvs-builder@U16-I2-C03-12-4)  Thu Sep 25 2025\nGCC version:  gcc version 12.2.0\n"
)


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        ({"version.json": '{"cuda": {"version": "12.4.1"}, "cuda_nvcc": {"version": "12.4.131"}}'},
         "12.4.131"),
        ({"version.txt": "CUDA Version 10.2.89\n"}, "10.2.89"),
        ({"dist-info/nvidia_cuda_nvcc-13.0.88.dist-info/METADATA": ""}, "13.0.88"),
        ({}, "present, version unknown"),
    ],
)  # fmt: skip
def test_the_gpu_toolkit_is_read_from_files(
    tmp_path: Path, layout: dict[str, str], expected: str
) -> None:
    from anyaccel.cli.environment import gpu_toolkit

    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "nvcc").write_text("")
    for name, text in layout.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    driver = tmp_path / "version"
    driver.write_text(_DRIVER_TEXT)
    found = gpu_toolkit({"CUDA_HOME": str(home), "PATH": ""}, driver)
    assert found == {"nvidia_driver": "580.95.05", "cuda_home": str(home), "nvcc": expected}


def test_no_gpu_toolkit_is_none_everywhere(tmp_path: Path) -> None:
    from anyaccel.cli.environment import gpu_toolkit

    found = gpu_toolkit({"CUDA_HOME": str(tmp_path / "nothing"), "PATH": ""}, tmp_path / "none")
    assert found == {"nvidia_driver": None, "cuda_home": None, "nvcc": None}


def test_the_report_names_the_driver_and_nvcc(tmp_path: Path) -> None:
    data = {"gpu_toolkit": {"nvidia_driver": "580.95.05", "cuda_home": "/opt/cuda", "nvcc": "13.0"}}
    with simulate_cuda(device_count=1):
        from anyaccel.backends.cuda import CudaAccelerator

        report = environment_report(CudaAccelerator())
    assert set(report["gpu_toolkit"]) == {"nvidia_driver", "cuda_home", "nvcc"}
    text = format_environment({**report, **data})
    assert "driver 580.95.05, nvcc 13.0 (/opt/cuda)" in text
