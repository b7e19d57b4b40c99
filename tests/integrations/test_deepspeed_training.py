"""``deepspeed.initialize`` trains on anyaccel's accelerator exactly as on DeepSpeed's own.

Two ``torchrun --nproc-per-node 2`` launches (gloo), one per accelerator, each running every
configuration (ZeRO 0-3, fp32 and bf16, with and without CPU optimizer offload) for 20 steps;
the losses must be equal step for step. Two more launches run ZeRO-2 and ZeRO-3 with
``deepspeed.init_distributed()`` naming no backend, as users call it: anyaccel's CPU answers
``anyaccel_shm``, and gloo with ``ANYACCEL_SHM_BACKEND=0``; their losses must be equal.
DeepSpeed's CPU Adam is built just in time on first use: ``ANYACCEL_DEEPSPEED_EXTENSIONS_DIR``
(or ``TORCH_EXTENSIONS_DIR``) keeps that build.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.ports import free_port

from .conftest import child_env, finish_launch
from .deepspeed_train import CONFIGS, config_name

pytestmark = [pytest.mark.deepspeed, pytest.mark.slow]

SCRIPT = Path(__file__).with_name("deepspeed_train.py")
STEPS = 20
#: The configurations also run on the anyaccel_shm torch.distributed backend (issue 26).
SHM_CONFIGS = [config_name(stage, dtype, False) for stage in (2, 3) for dtype in ("fp32", "bf16")]


def _launch(
    ds_python: str, out: Path, accelerator: str, extra: list[str], shm_setting: str | None
) -> subprocess.Popen[bytes]:
    env = dict(child_env(), DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    env.pop("ANYACCEL_SHM_BACKEND", None)
    if shm_setting is not None:
        env["ANYACCEL_SHM_BACKEND"] = shm_setting
    command = [
        ds_python, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
        str(SCRIPT), "--accelerator", accelerator, "--steps", str(STEPS),
        "--out", str(out.with_suffix(".json")), *extra,
    ]  # fmt: skip
    log = out.with_suffix(".log").open("w")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)


@pytest.fixture(scope="module")
def shm_runs(
    ds_python: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, object]]:
    """ZeRO-2/3 on anyaccel's accelerator naming no backend, as it comes and with gloo kept."""
    out_dir = tmp_path_factory.mktemp("deepspeed_shm_runs")
    launches = {
        backend: _launch(ds_python, out_dir / backend, "anyaccel",
                         ["--dist-backend", "asked", "--only", *SHM_CONFIGS], setting)
        for backend, setting in (("gloo", "0"), ("anyaccel_shm", None))
    }  # fmt: skip
    results = {}
    for backend, process in launches.items():
        finish_launch(process, (out_dir / backend).with_suffix(".log"), backend)
        results[backend] = json.loads((out_dir / backend).with_suffix(".json").read_text())
    return results


@pytest.mark.parametrize("name", SHM_CONFIGS)
def test_zero_asking_the_accelerator_gets_anyaccel_shm_with_gloos_losses(
    name: str, shm_runs: dict[str, dict[str, Any]]
) -> None:
    assert [shm_runs[b]["backend"] for b in ("gloo", "anyaccel_shm")] == ["gloo", "anyaccel_shm"]
    ours, theirs = shm_runs["anyaccel_shm"]["losses"][name], shm_runs["gloo"]["losses"][name]
    assert len(ours) == STEPS and ours == theirs
    assert ours[-1] < 0.9 * ours[0], f"{name} did not train: {ours[0]} -> {ours[-1]}"


@pytest.fixture(scope="module")
def runs(ds_python: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    """Both launches at once (they overlap DeepSpeed's import and start-up); their results."""
    out_dir = tmp_path_factory.mktemp("deepspeed_runs")
    env = dict(child_env(), DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    launches = {}
    for accelerator in ("deepspeed", "anyaccel"):
        command = [
            ds_python, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
            str(SCRIPT), "--accelerator", accelerator, "--steps", str(STEPS),
            "--out", str(out_dir / f"{accelerator}.json"),
        ]  # fmt: skip
        log = (out_dir / f"{accelerator}.log").open("w")
        launches[accelerator] = (
            subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env),
            out_dir / f"{accelerator}.log",
        )
    results = {}
    for accelerator, (process, log_path) in launches.items():
        finish_launch(process, log_path, accelerator)
        results[accelerator] = json.loads((out_dir / f"{accelerator}.json").read_text())
    return results


def test_each_run_trained_on_the_accelerator_it_names(runs: dict[str, dict[str, object]]) -> None:
    assert (
        runs["deepspeed"]["accelerator"] == "deepspeed.accelerator.cpu_accelerator.CPU_Accelerator"
    )
    assert runs["anyaccel"]["accelerator"] == "anyaccel.backends.cpu.CpuAccelerator"


@pytest.mark.parametrize("name", [config_name(*config) for config in CONFIGS])
def test_losses_equal_deepspeeds_own_accelerator_step_for_step(
    name: str, runs: dict[str, dict[str, dict[str, list[float]]]]
) -> None:
    ours = runs["anyaccel"]["losses"][name]
    theirs = runs["deepspeed"]["losses"][name]
    assert len(ours) == len(theirs) == STEPS
    assert ours == theirs
    assert ours[-1] < 0.9 * ours[0], f"{name} did not train: {ours[0]} -> {ours[-1]}"
