"""The CLI on a real GPU: detection picks cuda alone, conformance passes, the report names it."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from .harness import GPU, explain, run_module, run_python

pytestmark = GPU

PROOF = Path(__file__).resolve().parents[2] / "tools" / "gpu_proof.py"


@pytest.fixture(scope="module")
def proof() -> ModuleType:
    """tools/gpu_proof.py, whose driver and nvcc look-ups are the independent answers here."""
    spec = importlib.util.spec_from_file_location("gpu_proof", PROOF)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_proof"] = module
    spec.loader.exec_module(module)
    return module


def test_detection_picks_cuda_on_its_own() -> None:
    done = run_python(
        """
        import anyaccel
        print(anyaccel.get_accelerator()._name)
        """,
        DS_ACCELERATOR=None,
    )
    assert done.returncode == 0, explain(done)
    assert done.stdout.split()[-1] == "cuda"


def test_conformance_passes_on_the_cuda_backend() -> None:
    done = run_module(
        "anyaccel", "conformance", "anyaccel.backends.cuda:CudaAccelerator", "--json", timeout=600
    )
    assert done.returncode == 0, explain(done)
    result = json.loads(done.stdout)
    failed = [row for row in result["results"] if row["status"] not in ("passed", "skipped")]
    assert result["passed"] is True and not failed, failed


def test_report_names_the_gpu_driver_cuda_and_nvcc(proof: ModuleType) -> None:
    done = run_module("anyaccel", "report", "--json", "--devices", DS_ACCELERATOR=None)
    assert done.returncode == 0, explain(done)
    report = json.loads(done.stdout)
    assert report["report"]["accelerator"] == "cuda"
    environment = report["environment"]
    names = [device.get("name") for device in environment["devices"]]
    assert torch.cuda.get_device_name(0) in names
    assert environment["torch"]["build"] == f"CUDA {torch.version.cuda}"
    text = json.dumps(report)
    driver = proof.nvidia_driver_version()
    assert driver, "no driver version found through /proc/driver/nvidia/version or nvidia-smi"
    assert driver in text, f"the report does not name the NVIDIA driver {driver}"
    nvcc = proof.nvcc_version()
    if nvcc is None:
        pytest.skip("no nvcc on this machine: nothing to name")
    assert nvcc in text, f"the report does not name nvcc {nvcc}"
