"""Each PrivateUse1 vendor path trains for real: the simulated runtime over emulated devices.

``python -m anyaccel.testing.simulated VENDOR:2`` gives anyaccel's own vendor backend
(``NpuAccelerator``, ``MluAccelerator``...) devices that hold tensors, so a training run on
``npu:0`` is a training run, and a tensor left on the CPU fails as on the hardware. Each run
here is compared with the same run on the CPU: fp32 losses and weights bit for bit (the
kernels are the CPU's). Vendors rotate over the paths (the README script, the examples) so
each path runs on one vendor and every vendor trains; the per-vendor probe runs on all five.
"""

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

from anyaccel.emulated.state import MINIMUM_TORCH
from anyaccel.emulated.vendors.processes import EMULATED_VENDORS, parse_simulation, simulation_for
from anyaccel.testing.simulated.__main__ import main as runner_main

ROOT = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).with_name("vendor_probe.py")
TIMEOUT = 600
#: Each vendor's torch.distributed backend name, as its runtime registers it.
COLLECTIVES = {"npu": "hccl", "mlu": "cncl", "sdaa": "tccl", "musa": "mccl", "supa": "bccl"}
CLASSES = {
    "npu": "NpuAccelerator",
    "mlu": "MluAccelerator",
    "sdaa": "SdaaAccelerator",
    "musa": "MusaAccelerator",
    "supa": "SupaAccelerator",
}
SAME_DEVICE = "Expected all tensors to be on the same device"

needs_emulated_device = pytest.mark.skipif(
    tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2]) < MINIMUM_TORCH,
    reason=f"the emulated device needs torch >= {MINIMUM_TORCH[0]}.{MINIMUM_TORCH[1]}",
)


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DS_ACCELERATOR", "ANYACCEL_EMULATED")
        and not k.startswith(("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_"))
    }
    env.update(PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", **extra)
    return env


def _run(
    command: list[str],
    vendor: str | None,
    *,
    torchrun: bool = False,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` (a script and its arguments) on ``vendor``'s devices, or on the CPU."""
    extra = env or {}
    launcher = [sys.executable]
    if torchrun:
        launcher += ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    if vendor is None:
        full, child_env = launcher + command, _env(DS_ACCELERATOR="cpu", **extra)
    else:
        runner = ["-m", "anyaccel.testing.simulated", f"{vendor}:2"]
        full, child_env = launcher + runner + command, _env(**extra)
    result = subprocess.run(
        full, capture_output=True, text=True, timeout=TIMEOUT, env=child_env, cwd=ROOT, check=False
    )
    if check:
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result


# ------------------------------------------------------------------ the runner's own inputs
@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["cuda:2", "train.py"], ["'cuda' is not a simulated vendor", "npu, mlu, sdaa"]),
        (["hpu", "train.py"], ["'hpu'", "PrivateUse1 cannot take"]),
        (["npu:0", "train.py"], ["device count '0' in 'npu:0'"]),
        (["npu:two", "train.py"], ["device count 'two'"]),
        (["npu:2", "-m"], ["-m needs a module name"]),
        (["npu:2"], ["usage: python -m anyaccel.testing.simulated"]),
    ],
)
def test_the_runner_refuses_bad_arguments_with_usage_and_installs_nothing(
    argv: list[str], words: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from anyaccel.emulated.state import installed_spec

    assert runner_main(argv) == 2
    error = capsys.readouterr().err
    assert all(word in error for word in words), error
    assert "usage:" in error
    assert installed_spec() is None  # nothing was installed in this (the test) process


def test_the_runner_help_is_not_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert runner_main(["--help"]) == 0
    assert "VENDOR[:COUNT]" in capsys.readouterr().err


def test_every_privateuse1_vendor_has_an_emulated_simulation() -> None:
    assert set(EMULATED_VENDORS) == set(COLLECTIVES)
    with pytest.raises(ValueError, match="'xpu' is not a simulated vendor"):
        simulation_for("xpu:1")
    assert parse_simulation("mlu") == ("mlu", 2) and parse_simulation("npu:3") == ("npu", 3)


# ------------------------------------------------------------------ every vendor trains
@pytest.fixture(scope="module")
def cpu_probe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("probe") / "cpu.json"
    _run([str(PROBE), str(out)], None)
    report: dict[str, Any] = json.loads(out.read_text())
    return report


@needs_emulated_device
@pytest.mark.slow
@pytest.mark.parametrize("vendor", EMULATED_VENDORS)
def test_each_vendor_backend_trains_on_its_own_device_type_as_the_cpu_does(
    vendor: str, cpu_probe: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / f"{vendor}.json"
    _run([str(PROBE), str(out)], vendor)
    report = json.loads(out.read_text())
    assert (report["accelerator"], report["backend"]) == (CLASSES[vendor], COLLECTIVES[vendor])
    # parameters, gradients, optimizer state, batches and losses: all on the vendor's device
    assert report["devices"] == [f"{vendor}:0"] and report["device"] == f"{vendor}:0"
    assert report["autocast"] == ["torch.bfloat16", f"{vendor}:0"]
    assert report["memory_allocated"] > 0  # the device's own accounting, read by the backend
    assert "uses its memory for real" in report["allocate"]  # no make-believe bookkeeping
    # the CPU's kernels over the device's memory: the CPU's results, bit for bit
    assert report["losses"] == cpu_probe["losses"]
    assert report["weights"] == cpu_probe["weights"]
    assert report["noise"] == cpu_probe["noise"]  # manual_seed reached the device's generator
    # the negative: the same model fed a CPU tensor runs on the CPU, fails on the device
    assert cpu_probe["left_on_cpu"] == "no error"
    assert SAME_DEVICE in report["left_on_cpu"] and f"{vendor}:0" in report["left_on_cpu"]


# ------------------------------------------------------------------ the README script
def _readme_script() -> str:
    text = (ROOT / "README.md").read_text()
    using = text[text.index("## Using it") :]
    match = re.search(r"<!-- runnable -->\n```python\n(.*?)```", using, re.S)
    assert match is not None, "README.md's 'Using it' has no runnable script"
    return match.group(1)


#: Put before the README script's last lines: each rank writes what is compared to a file.
REPORT = """
import json as _json, os as _os
_weights = torch.cat([p.detach().float().cpu().flatten() for p in model.parameters()])
with open(_os.path.join(_os.environ["REPORT_DIR"], f"rank{rank}.json"), "w") as _out:
    _json.dump({"loss": loss.item(), "weights": _weights.tolist(), "device": str(loss.device),
                "backend": torch.distributed.get_backend() if world_size > 1 else None}, _out)
"""


def _readme_runs(tmp_path: Path, vendor: str | None, *, torchrun: bool) -> list[dict[str, Any]]:
    out = tmp_path / (vendor or "cpu") / ("ddp" if torchrun else "one")
    out.mkdir(parents=True)
    path = out / "train.py"
    script, ending = (
        _readme_script(),
        "if world_size > 1:\n    torch.distributed.destroy_process_group()",
    )
    assert script.rstrip().endswith(ending), "the README script no longer ends as expected"
    path.write_text(script.rstrip()[: -len(ending)] + REPORT + ending + "\n")
    _run([str(path)], vendor, torchrun=torchrun, env={"REPORT_DIR": str(out)})
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]


@needs_emulated_device
@pytest.mark.slow
def test_the_readme_script_trains_on_an_npu_as_on_the_cpu_and_a_cpu_batch_fails(
    tmp_path: Path,
) -> None:
    (npu,) = _readme_runs(tmp_path, "npu", torchrun=False)
    (cpu,) = _readme_runs(tmp_path, None, torchrun=False)
    assert npu["device"] == "npu:0" and cpu["device"] == "cpu"
    assert npu["weights"] == cpu["weights"] and npu["loss"] == cpu["loss"]
    # the negative: targets left on the CPU (the inputs moved) fail on the NPU
    script = _readme_script()
    moved = "targets.to(device, non_blocking=True)"
    assert moved in script
    broken = tmp_path / "broken.py"
    broken.write_text(script.replace(moved, "targets"))
    result = _run([str(broken)], "npu", check=False)
    assert result.returncode != 0 and SAME_DEVICE in result.stderr, result.stderr[-2000:]


@needs_emulated_device
@pytest.mark.slow
def test_the_readme_script_under_torchrun_trains_ddp_on_two_mlus_on_cncl_as_on_the_cpu(
    tmp_path: Path,
) -> None:
    mlu = _readme_runs(tmp_path, "mlu", torchrun=True)
    cpu = _readme_runs(tmp_path, None, torchrun=True)
    assert [r["device"] for r in mlu] == ["mlu:0", "mlu:1"]
    assert [r["backend"] for r in mlu] == ["cncl", "cncl"]
    assert [r["weights"] for r in mlu] == [r["weights"] for r in cpu]
    assert [r["loss"] for r in mlu] == [r["loss"] for r in cpu]


# ------------------------------------------------------------------ the examples
def _steps(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.lstrip().startswith("step")]


@needs_emulated_device
@pytest.mark.slow
def test_quickstart_trains_on_an_sdaa_in_bf16_and_counts_the_devices_memory() -> None:
    """quickstart draws its data from the device's generator, whose stream is not the CPU's (as
    on a GPU), so its losses are compared with nothing: they must fall, on the device."""
    sdaa = _run(["examples/quickstart.py"], "sdaa").stdout
    assert "accelerator: sdaa (detected), device sdaa:0, 2 visible" in sdaa
    assert "dtype: bfloat16" in sdaa
    losses = [float(line.split()[-1]) for line in _steps(sdaa)]
    assert len(losses) == 5 and losses[-1] < losses[0] / 10, sdaa
    assert "memory (tensor memory): " in sdaa  # the device's accounting, not the process's


@needs_emulated_device
@pytest.mark.slow
def test_the_ddp_example_under_torchrun_trains_on_two_musas_on_mccl_as_on_the_cpu() -> None:
    command = ["examples/ddp_train.py", "--steps", "10"]
    musa = _run(command, "musa", torchrun=True).stdout
    cpu = _run(command, None, torchrun=True).stdout
    assert "done: 2 ranks on musa (mccl), parameters in sync across ranks" in musa, musa
    assert _steps(musa) == _steps(cpu) and len(_steps(musa)) == 2


CHILD = """
import subprocess, sys
code = ("import torch; from anyaccel import get_accelerator; a = get_accelerator(); "
        "print(type(a).__name__, torch.zeros(1, device=a.current_device_name()).device)")
print(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip())
"""


@needs_emulated_device
@pytest.mark.slow
def test_a_process_the_script_starts_sees_the_same_vendor_devices(tmp_path: Path) -> None:
    """Frameworks ask in child processes (accelerate's probe, spawned workers): they must see
    the vendor the script runs on, not the bare host."""
    script = tmp_path / "parent.py"
    script.write_text(CHILD)
    assert _run([str(script)], "mlu").stdout.strip() == "MluAccelerator mlu:0"
