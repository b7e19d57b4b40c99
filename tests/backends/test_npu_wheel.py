"""The real torch-npu wheel, installed without Ascend CANN, in a throwaway virtual environment.

The wheel imports fail for want of ``libhccl.so``, and its ``torch.backends`` autoload entry
point breaks ``import torch`` itself unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``. anyaccel must
fall through to the CPU with the error in the trace, and a forced ``npu`` must name CANN.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.network,
    pytest.mark.skipif(
        os.environ.get("ANYACCEL_OFFLINE") == "1", reason="ANYACCEL_OFFLINE=1: no PyPI access"
    ),
]

WHEEL = f"torch-npu=={torch.__version__.split('+')[0]}"

_REPORT = """
import json, os
import anyaccel
from anyaccel.detection import detect_accelerator
try:
    acc, report = detect_accelerator()
except anyaccel.AcceleratorError as error:
    print(json.dumps({"error": str(error), "kind": getattr(error, "kind", None)}))
else:
    npu = next(p for p in report.probes if p.name == "npu")
    print(json.dumps({"name": acc._name, "npu_kind": npu.kind, "npu_reason": npu.reason,
                      "autoload": os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD")}))
"""


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("npu-venv")
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(root)],
        check=True,
        timeout=120,
    )
    python = root / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--quiet", WHEEL],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if install.returncode != 0:
        pytest.skip(f"could not install {WHEEL}: {install.stderr.strip()[-300:]}")
    yield python


def _run(python: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    environment.update(env)
    return subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, env=environment, timeout=120
    )


def _json(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    import json

    assert result.returncode == 0, result.stderr[-2000:]
    parsed: dict[str, str] = json.loads(result.stdout.strip().splitlines()[-1])
    return parsed


def test_autoload_makes_import_torch_fail(venv_python: Path) -> None:
    result = _run(venv_python, "import torch", TORCH_DEVICE_BACKEND_AUTOLOAD="1")
    assert result.returncode != 0 and "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in result.stderr


def test_detection_falls_through_to_cpu_with_the_import_error(venv_python: Path) -> None:
    found = _json(_run(venv_python, _REPORT, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    assert found["name"] == "cpu"
    assert found["npu_kind"] == "broken" and "libhccl.so" in found["npu_reason"]
    assert found["autoload"] == "0"  # the failed import's own switch-flip was undone


def test_forced_npu_reports_the_missing_cann_library(venv_python: Path) -> None:
    found = _json(
        _run(venv_python, _REPORT, TORCH_DEVICE_BACKEND_AUTOLOAD="0", DS_ACCELERATOR="npu")
    )
    assert found["kind"] == "broken"
    assert "CANN" in found["error"] and "libhccl.so" in found["error"]
    assert "not installed" not in found["error"]
