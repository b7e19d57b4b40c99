"""The examples run as the README says they do."""

from __future__ import annotations

import importlib.util
import json
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
    assert "memory (process resident memory): " in result.stdout
    assert "Failed to initialize NumPy" not in result.stderr  # torch's warning without NumPy


# Under each simulated vendor runtime, every device the examples hand to torch is recorded (and
# replaced by the CPU so the run goes on); a device type the backend's tensors do not live on
# (klxpu's tensors are on 'cuda') is what a user of that hardware would see fail.
SIMULATED_RUN = """
import contextlib, json, os, sys
import torch
import torch._dynamo  # reads torch.cuda on import: before a simulation replaces it
from torch import nn
import anyaccel
from anyaccel.testing import simulated

sys.path.insert(0, sys.argv[1])
import ddp_train, quickstart

seen = []
def record(api, device):
    if isinstance(device, (str, torch.device)):
        seen.append([api, str(device).partition(":")[0]])
        return "cpu"
    return device

real_autocast, real_scaler = torch.autocast, torch.amp.GradScaler
real_randn, real_module_to, real_tensor_to = torch.randn, nn.Module.to, torch.Tensor.to

def autocast(device_type, dtype=None, enabled=True, **kw):
    record("torch.autocast", device_type)
    return real_autocast("cpu", dtype=torch.bfloat16, enabled=enabled)

def scaler(device="cuda", **kw):
    record("GradScaler", device)
    return real_scaler("cpu", enabled=False)

def randn(*size, device=None, **kw):
    return real_randn(*size, device=record("torch.randn", device), **kw)

def moved(real, api):
    def to(self, *args, **kw):
        args = [record(api, a) for a in args]
        if "device" in kw:
            kw["device"] = record(api, kw["device"])
        return real(self, *args, **kw)
    return to

torch.autocast, torch.amp.GradScaler, torch.randn = autocast, scaler, randn
# The simulated runtimes patch torch.cuda's Python side; on a CUDA build of torch without a
# driver, torch.optim's graph-capture check asks the real runtime through torch.accelerator.
for check in ("_accelerator_graph_capture_health_check", "_cuda_graph_capture_health_check"):
    if hasattr(torch.optim.Optimizer, check):
        setattr(torch.optim.Optimizer, check, lambda self: None)
torch.manual_seed = torch.default_generator.manual_seed  # simulated torch.cuda: no fork state
nn.Module.to = moved(real_module_to, "Module.to")
torch.Tensor.to = moved(real_tensor_to, "Tensor.to")
results = {}
for name in sys.argv[2:]:
    with getattr(simulated, "simulate_" + name)() as runtime:
        os.environ["DS_ACCELERATOR"] = name
        anyaccel.reset_accelerator()
        seen.clear()
        with contextlib.redirect_stdout(sys.stderr):
            quickstart.main(steps=2)
            sys.argv[1:] = ["--steps", "2"]
            ddp_train.main()
        results[name] = {"expected": runtime.device_type, "seen": list(seen)}
print(json.dumps(results))
"""

SIMULATED = ("klxpu", "supa", "musa", "npu", "mlu", "sdaa", "hpu", "xpu", "mps", "cuda")


def test_examples_hand_torch_the_device_type_of_every_simulated_backend() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLES.parent / "src"), env.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-c", SIMULATED_RUN, str(EXAMPLES), *SIMULATED],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    results = json.loads(result.stdout.splitlines()[-1])
    assert sorted(results) == sorted(SIMULATED)
    for name, run in results.items():
        wrong = [(api, kind) for api, kind in run["seen"] if kind not in (run["expected"], "cpu")]
        assert not wrong, f"on {name} (tensors on {run['expected']!r}) the examples gave {wrong}"
        apis = {api for api, kind in run["seen"] if kind == run["expected"]}
        assert {"torch.autocast", "GradScaler", "Module.to", "Tensor.to"} <= apis, (name, apis)


def test_ddp_example_runs_as_one_plain_process() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "ddp_train.py"), "--steps", "5"],
        capture_output=True,
        text=True,
        timeout=240,
        env={**env, "DS_ACCELERATOR": "cpu"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "step    5  loss" in result.stdout
    assert "done: 1 process on cpu (not launched: no DDP)" in result.stdout
