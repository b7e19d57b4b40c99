"""DeepSpeed ZeRO-2/3 on anyaccel's NpuAccelerator trains on ``npu`` tensors as it does on the CPU.

Two ``torchrun --nproc-per-node 2`` launches of ``deepspeed_vendor_train.py`` at once: one on
anyaccel's CPU accelerator, one through ``python -m anyaccel.testing.simulated npu:2`` (the
simulated ``torch_npu`` over emulated ``npu`` devices, collectives under ``hccl``). The device
run's losses and weights must equal the CPU run's bit for bit (the emulated device runs the
CPU's kernels), and a batch left on the CPU must fail there while the CPU run takes it.
CPU optimizer offload is not run on the device: DeepSpeed's NPU op builders need CANN.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from anyaccel.ops.jit.toolchain import toolchain_problem
from tests.ports import free_port

from .conftest import child_env, finish_launch, run_python
from .deepspeed_vendor_train import CONFIGS, STEPS

pytestmark = [pytest.mark.deepspeed, pytest.mark.slow]

SCRIPT = Path(__file__).with_name("deepspeed_vendor_train.py")
MISPLACED = "Expected all tensors to be on the same device"


@pytest.fixture(scope="module")
def runs(ds_python: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    """Both launches at once; each one's per-rank results, rank 0 first."""
    version = run_python(ds_python, "import torch; print(torch.__version__)").stdout.strip()
    if tuple(int(part) for part in version.split("+")[0].split(".")[:2]) < (2, 13):
        pytest.skip(f"the emulated device needs torch >= 2.13; DeepSpeed's torch is {version}")
    problem = toolchain_problem()
    if problem is not None:
        pytest.skip(f"the emulated device is built on first use: {problem}")
    root = tmp_path_factory.mktemp("deepspeed_vendor")
    env = dict(child_env(), OMP_NUM_THREADS="1")
    launcher = [ds_python, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                "--master-addr", "127.0.0.1"]  # fmt: skip
    targets = {
        "cpu": [str(SCRIPT)],
        "npu": ["-m", "anyaccel.testing.simulated", "npu:2", str(SCRIPT)],
    }
    launches = {}
    for name, target in targets.items():
        (root / name).mkdir()
        port = ["--master-port", str(free_port())]
        command = [*launcher, *port, *target, "--out", str(root / name)]
        log = (root / f"{name}.log").open("w")
        launches[name] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    results = {}
    for name, process in launches.items():
        finish_launch(process, root / f"{name}.log", name)
        results[name] = [json.loads((root / name / f"rank{r}.json").read_text()) for r in (0, 1)]
    return results


def test_the_device_run_used_anyaccels_npu_backend_and_hccl(runs: dict[str, list[Any]]) -> None:
    for rank, result in enumerate(runs["npu"]):
        assert result["accelerator"] == "anyaccel.backends.npu.NpuAccelerator"
        assert result["communication_backend_name"] == result["backend"] == "hccl"
        assert result["device"] == f"npu:{rank}"
    assert [r["accelerator"] for r in runs["cpu"]] == ["anyaccel.backends.cpu.CpuAccelerator"] * 2


@pytest.mark.parametrize("name", list(CONFIGS))
def test_zero_weights_live_on_the_ranks_npu(name: str, runs: dict[str, list[Any]]) -> None:
    assert [r["runs"][name]["param_devices"] for r in runs["npu"]] == [["npu:0"], ["npu:1"]]
    assert [r["runs"][name]["param_devices"] for r in runs["cpu"]] == [["cpu"], ["cpu"]]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_zero_on_npu_gives_the_cpu_runs_losses_and_weights(
    name: str, runs: dict[str, list[Any]]
) -> None:
    for device, cpu in zip(runs["npu"], runs["cpu"], strict=True):
        ours, theirs = device["runs"][name], cpu["runs"][name]
        assert len(ours["losses"]) == STEPS
        assert ours["losses"] == theirs["losses"]
        assert ours["weights"] == theirs["weights"]
        assert ours["losses"][-1] < ours["losses"][0], f"{name} did not train: {ours['losses']}"
    assert runs["npu"][0]["runs"][name]["weights"] == runs["npu"][1]["runs"][name]["weights"]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_batch_left_on_the_cpu_fails_on_npu_and_passes_on_the_cpu(
    name: str, runs: dict[str, list[Any]]
) -> None:
    for device, cpu in zip(runs["npu"], runs["cpu"], strict=True):
        assert MISPLACED in device["runs"][name]["cpu_batch"]
        assert cpu["runs"][name]["cpu_batch"] == "ok"
