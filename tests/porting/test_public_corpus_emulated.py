"""The ported nanoGPT trains under torchrun on an emulated NPU as it does on the CPU (issue 37).

``anyaccel port`` rewrites nanoGPT's ``train.py`` (its DDP set-up, devices, autocast, pinned
batches, gradient scaler); here the port runs as users run it on two ranks, once on the CPU
and once through ``python -m anyaccel.testing.simulated npu:2`` (anyaccel's ``NpuAccelerator``
over emulated ``npu`` devices: real tensors on ``npu:N``, collectives under ``hccl``), both with
``--dtype=float32``. The losses nanoGPT prints must match, and so must the weights it saves,
bit for bit: the device answers torch's choice of attention kernel as the CPU does.
A copy whose batch stays on the CPU fails on the device with torch's own error, and trains on
the CPU. Four launches at once, one module fixture.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_public_corpus import CORPUS, LAUNCH_ENV, SCRIPTS, SRC, TIMEOUT, run_directory

from anyaccel.ops.jit.toolchain import toolchain_problem

pytestmark = pytest.mark.slow

NAME = "nanogpt_train"
#: The batch moved to the device in the ported get_batch, and the same line leaving it behind.
MOVED = "get_accelerator().pin_memory(x).to(device, non_blocking=True)"
LEFT = "get_accelerator().pin_memory(x)"
MISPLACED = "Expected all tensors to be on the same device"
RUNNER = ["-m", "anyaccel.testing.simulated"]
ITER = re.compile(r"iter (\d+): loss (\d+\.\d+)")


def _launch(cwd: Path, prefix: list[str]) -> subprocess.Popen[bytes]:
    entry = SCRIPTS[NAME]
    args = [*entry["limits"], *entry["settings"], "--dtype=float32"]
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV}
    env.update(PYTHONPATH=str(SRC), OMP_NUM_THREADS="1")
    log = (cwd / "log.txt").open("w")
    command = [sys.executable, *prefix, "train.py", *args]
    return subprocess.Popen(
        command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, Path]]:
    """cpu, npu (2 ranks each) and the misplaced copy's cpu-1 and npu-1: exit code, folder."""
    import torch

    if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 13):
        pytest.skip(f"the emulated device needs torch >= 2.13, not {torch.__version__}")
    problem = toolchain_problem()
    if problem is not None:
        pytest.skip(f"the emulated device is built on first use: {problem}")
    pytest.importorskip("numpy")
    root = tmp_path_factory.mktemp("emulated_corpus")
    shutil.copytree(CORPUS, root / "ported", dirs_exist_ok=True)
    ported = subprocess.run(
        [sys.executable, "-m", "anyaccel", "port", "--write", "."],
        cwd=root / "ported", env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert ported.returncode == 0, ported.stderr
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    prefixes = {
        "cpu": torchrun,
        "npu": [*torchrun, *RUNNER, "npu:2"],
        "misplaced-cpu": [],
        "misplaced-npu": [*RUNNER, "npu:1"],
    }
    launches = {}
    for name, prefix in prefixes.items():
        cwd = run_directory(root / "ported", NAME, root / name)
        if name.startswith("misplaced"):
            script = cwd / "train.py"
            text = script.read_text()
            assert text.count(MOVED) == 1, "the port no longer moves the batch this way"
            script.write_text(text.replace(MOVED, LEFT))
        launches[name] = (_launch(cwd, prefix), cwd)
    results = {}
    for name, (process, cwd) in launches.items():
        try:
            code = process.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        results[name] = (code, cwd)
    return results


def _log(run: tuple[int, Path]) -> str:
    return (run[1] / "log.txt").read_text()


def _checkpoint(run: tuple[int, Path]) -> dict[str, object]:
    import torch

    assert run[0] == 0, _log(run)[-4000:]
    state: dict[str, object] = torch.load(
        run[1] / "out" / "ckpt.pt", map_location="cpu", weights_only=False
    )
    return state


def test_the_port_trains_on_the_npu_with_hccl(runs: dict[str, tuple[int, Path]]) -> None:
    config = _checkpoint(runs["npu"])["config"]
    assert isinstance(config, dict)
    assert (config["device"], config["backend"]) == ("npu", "hccl")
    cpu_config = _checkpoint(runs["cpu"])["config"]
    assert isinstance(cpu_config, dict) and cpu_config["device"] == "cpu"


def test_the_npu_run_prints_the_cpu_runs_losses(runs: dict[str, tuple[int, Path]]) -> None:
    npu, cpu = (ITER.findall(_log(runs[name])) for name in ("npu", "cpu"))
    assert [int(i) for i, _ in npu] == [0, 1, 2, 3], _log(runs["npu"])[-3000:]
    assert npu == cpu


def test_the_npu_run_saves_the_cpu_runs_weights(runs: dict[str, tuple[int, Path]]) -> None:
    import torch

    npu, cpu = _checkpoint(runs["npu"]), _checkpoint(runs["cpu"])
    assert npu["iter_num"] == cpu["iter_num"] == 2
    npu_model, cpu_model = npu["model"], cpu["model"]
    assert isinstance(npu_model, dict) and isinstance(cpu_model, dict)
    assert npu_model.keys() == cpu_model.keys()
    for key, weight in cpu_model.items():
        assert torch.equal(npu_model[key], weight), key


def test_a_batch_left_on_the_cpu_fails_on_the_npu_and_trains_on_the_cpu(
    runs: dict[str, tuple[int, Path]],
) -> None:
    code, _ = runs["misplaced-npu"]
    assert code != 0 and MISPLACED in _log(runs["misplaced-npu"]), _log(runs["misplaced-npu"])
    assert "npu:0 and cpu" in _log(runs["misplaced-npu"])
    assert _checkpoint(runs["misplaced-cpu"])["iter_num"] == 2
