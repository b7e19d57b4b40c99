"""The generic backend and a DeepSpeed-style plugin each train on their own emulated device type.

One child process per path (they run at once): ``emulated_training_child.py`` installs the
emulated device under a type anyaccel has no file for, lets ``get_accelerator()`` choose,
trains three Adam steps under bf16 autocast there and then on the CPU accelerator. The device
run's losses and weights must equal the CPU run's bit for bit, and a batch left on the CPU
must fail on the device (torch's own error) and train on the CPU.

Choosing: an installed emulated device is claimed by the ``emulated`` backend, which comes
before ``generic`` in the cascade; the generic backend (or a plugin for the type) is chosen by
naming it, ``DS_ACCELERATOR=<type>`` (or ``generic``), as docs/emulated.md says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from anyaccel.ops.jit.toolchain import toolchain_problem

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parents[1] / "src"
CHILD = HERE / "emulated_training_child.py"
MISPLACED = "Expected all tensors to be on the same device"

#: A vendor's accelerator written as DeepSpeed's are: names set in __init__, and every device
#: call handed to the vendor's torch module (here the emulated ``torch.ypu``).
_PLUGIN = '''
import torch
from anyaccel import Accelerator


class YpuAccelerator(Accelerator):
    """The ypu vendor's accelerator, the DeepSpeed way."""

    def __init__(self):
        self._name = "ypu"
        self._communication_backend_name = "yccl"
        self._compile_backend = "eager"

    visible_devices_env_names = ("YPU_VISIBLE_DEVICES",)

    def is_available(self): return torch.ypu.is_available()
    def device_count(self): return torch.ypu.device_count()
    def set_device(self, device_index): torch.ypu.set_device(device_index)
    def current_device(self): return torch.ypu.current_device()
    def synchronize(self, device_index=None): torch.ypu.synchronize(device_index)
    def set_rng_state(self, new_state, device_index=None):
        torch.ypu.set_rng_state(new_state, device_index or 0)
    def get_rng_state(self, device_index=None): return torch.ypu.get_rng_state(device_index or 0)
    def manual_seed(self, seed): torch.ypu.manual_seed(seed)
    def manual_seed_all(self, seed): torch.ypu.manual_seed_all(seed)
    def initial_seed(self): return torch.ypu.initial_seed()
    def memory_allocated(self, device_index=None): return torch.ypu.memory_allocated(device_index)
    def max_memory_allocated(self, device_index=None):
        return torch.ypu.max_memory_allocated(device_index)
    def reset_peak_memory_stats(self, device_index=None):
        torch.ypu.reset_peak_memory_stats(device_index)
    def total_memory(self, device_index=None):
        return torch.ypu.get_device_properties(device_index or 0).total_memory
'''


def _plugin_site(root: Path) -> Path:
    """The plugin as an installed distribution: its module and its entry point."""
    site = root / "site"
    info = site / "ypu_vendor-1.0.dist-info"
    info.mkdir(parents=True)
    (site / "ypu_vendor.py").write_text(_PLUGIN)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ypu-vendor\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[anyaccel.accelerators]\nypu = ypu_vendor:YpuAccelerator\n"
    )
    return site


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Both children at once; each one's JSON result."""
    import torch

    if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 13):
        pytest.skip(f"the emulated device needs torch >= 2.13, not {torch.__version__}")
    problem = toolchain_problem()
    if problem is not None:
        pytest.skip(f"the emulated device is built on first use: {problem}")
    site = _plugin_site(tmp_path_factory.mktemp("ypu_plugin"))
    base = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "ANYACCEL_PLUGINS")}
    children = {
        "generic": ("zpu", str(SOURCE)),
        "plugin": ("ypu", os.pathsep.join([str(site), str(SOURCE)])),
    }
    launches = {
        path: subprocess.Popen(
            [sys.executable, str(CHILD), path, device_type],
            env=dict(base, PYTHONPATH=python_path, DS_ACCELERATOR=device_type),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for path, (device_type, python_path) in children.items()
    }
    results = {}
    for path, process in launches.items():
        try:
            out, err = process.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
        assert process.returncode == 0, f"{path}: exit {process.returncode}\n{err[-4000:]}"
        results[path] = json.loads(out.strip().splitlines()[-1])
    return results


def test_the_generic_backend_drives_the_unknown_device_type(
    runs: dict[str, dict[str, Any]],
) -> None:
    generic = runs["generic"]
    assert generic["accelerator"] == "anyaccel.backends.generic.GenericAccelerator"
    assert generic["name"] == "zpu" and generic["device"]["devices"] == ["zpu:0"]


def test_the_deepspeed_style_plugin_drives_its_own_device_type(
    runs: dict[str, dict[str, Any]],
) -> None:
    plugin = runs["plugin"]
    assert plugin["accelerator"] == "ypu_vendor.YpuAccelerator"
    assert plugin["name"] == "ypu" and plugin["device"]["devices"] == ["ypu:0"]


@pytest.mark.parametrize("path", ["generic", "plugin"])
def test_training_on_the_device_equals_the_cpu_run(
    path: str, runs: dict[str, dict[str, Any]]
) -> None:
    device, cpu = runs[path]["device"], runs[path]["cpu"]
    assert cpu["devices"] == ["cpu"]
    assert device["losses"] == cpu["losses"] and len(device["losses"]) == 3
    assert device["weights"] == cpu["weights"]
    assert device["losses"][-1] < device["losses"][0], device["losses"]


@pytest.mark.parametrize("path", ["generic", "plugin"])
def test_autocast_on_the_device_type_computes_in_bfloat16(
    path: str, runs: dict[str, dict[str, Any]]
) -> None:
    assert runs[path]["device"]["autocast"] == runs[path]["cpu"]["autocast"] == ["torch.bfloat16"]
    assert runs[path]["device"]["memory_allocated"] is True


@pytest.mark.parametrize("path", ["generic", "plugin"])
def test_a_batch_left_on_the_cpu_fails_on_the_device_and_trains_on_the_cpu(
    path: str, runs: dict[str, dict[str, Any]]
) -> None:
    device_type = runs[path]["name"]
    assert MISPLACED in runs[path]["device"]["cpu_batch"]
    assert f"{device_type}:0 and cpu" in runs[path]["device"]["cpu_batch"]
    assert runs[path]["cpu"]["cpu_batch"] == "ok"
