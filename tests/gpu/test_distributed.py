"""Distributed on one GPU under ``torchrun --nproc-per-node 1``: NCCL serves CUDA tensors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

from .harness import GPU, child_env

pytestmark = GPU

CHILD = Path(__file__).with_name("distributed_child.py")


def torchrun(out: Path, *backend: str) -> dict[str, object]:
    """Launch the child under torchrun and return what it wrote."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", "1", str(CHILD), str(out), *backend]
    done = subprocess.run(
        command, env=child_env(DS_ACCELERATOR=None), capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, (
        f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    record: dict[str, object] = json.loads(out.read_text(encoding="utf-8"))
    return record


def test_init_distributed_uses_nccl_for_cuda_tensors(tmp_path: Path) -> None:
    record = torchrun(tmp_path / "out.json")
    assert (record["rank"], record["world_size"], record["device"]) == (0, 1, 0)
    assert record["backend"] == "nccl"
    assert record["cuda_backend"] == "nccl"
    assert record["cuda_sum"] == [3.0] * 4


@pytest.mark.skipif(not dist.is_gloo_available(), reason="this torch has no gloo")
def test_a_device_mapped_group_sends_each_tensor_to_its_backend(tmp_path: Path) -> None:
    record = torchrun(tmp_path / "out.json", "cpu:gloo,cuda:nccl")
    assert record["cuda_backend"] == "nccl" and record["cpu_backend"] == "gloo"
    assert record["cuda_sum"] == [3.0] * 4 and record["cpu_sum"] == [5.0] * 4
