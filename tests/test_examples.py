"""The examples run as the README says they do."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quickstart_training_reduces_the_loss() -> None:
    quickstart = load("quickstart")
    first = quickstart.main(steps=1)
    last = quickstart.main(steps=15)
    assert 0.0 <= last < first


def test_quickstart_prefers_low_precision() -> None:
    quickstart = load("quickstart")
    import torch

    assert quickstart.training_dtype([torch.float32]) == torch.float32
    assert quickstart.training_dtype([torch.float32, torch.float16]) == torch.float16
    assert (
        quickstart.training_dtype([torch.float32, torch.float16, torch.bfloat16]) == torch.bfloat16
    )


def test_quickstart_as_a_user_runs_it() -> None:
    env = {**os.environ, "DS_ACCELERATOR": "cpu"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=True,
    )
    assert "accelerator: cpu (DS_ACCELERATOR)" in result.stdout
    assert "step  20  loss" in result.stdout
    assert "MiB allocated" in result.stdout
    assert "Failed to initialize NumPy" not in result.stderr  # torch's warning without NumPy
