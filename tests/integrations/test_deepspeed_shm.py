"""DeepSpeed's CPU ``inference_all_reduce`` runs anyaccel's shared-memory op under anyaccel.

DeepSpeed asks the accelerator for ``ShareMemCommBuilder`` when it sets up its communication
backend, and calls ``torch.ops.deepspeed.inference_all_reduce_`` from the module it loads
(its fp32 path needs AVX2, its bf16 path AVX-512BW, else it falls back to the process group).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.ports import free_port

from .conftest import child_env

pytestmark = [pytest.mark.deepspeed, pytest.mark.slow]

SCRIPT = Path(__file__).with_name("deepspeed_shm_allreduce.py")


@pytest.fixture(scope="module")
def shm_run(ds_python: str) -> dict[str, object]:
    env = dict(child_env(), DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    command = [
        ds_python, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(SCRIPT),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, result.stdout[-3000:]
    parsed: dict[str, object] = json.loads(lines[-1])
    return parsed


def test_deepspeed_loaded_anyaccels_shared_memory_module(shm_run: dict[str, object]) -> None:
    assert "anyaccel" in str(shm_run["module"]) + str(shm_run["file"]), shm_run


def test_deepspeed_calls_the_module_for_every_dtype_its_kernel_level_allows(
    shm_run: dict[str, object],
) -> None:
    level = shm_run["kernel_level"]
    assert isinstance(level, int)
    if level < 1:
        pytest.skip("this CPU has no AVX2: DeepSpeed falls back to the process group")
    assert shm_run["calls"] == (2 if level >= 2 else 1)


def test_inference_all_reduce_sums_over_the_ranks(shm_run: dict[str, object]) -> None:
    assert shm_run["results"] == {"torch.float32": True, "torch.bfloat16": True}
