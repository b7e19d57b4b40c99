"""generic: a device PyTorch knows but anyaccel has no file for works with zero code."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from anyaccel.backends import generic
from anyaccel.backends.generic import GenericAccelerator
from anyaccel.errors import AcceleratorUnavailableError
from anyaccel.testing.simulated import simulate_cpu_only_torch, simulate_cuda

# Registers a pure-Python device module under a PrivateUse1 name, as a vendor extension
# would, then asks anyaccel with no code for that device.
_PRIVATEUSE1 = """
import json, os, sys, warnings
import torch
from anyaccel.testing.simulated import SimulatedDeviceModule

warnings.simplefilter("ignore")
name, with_hook = sys.argv[1], sys.argv[2] == "hook"
torch.utils.rename_privateuse1_backend(name)
module = SimulatedDeviceModule("torch." + name, device_type=name, device_count=3,
                               graph_class_name=None, profiler_name=None, host_register=None)
torch._register_device_module(name, module)
if with_hook:  # lets torch.accelerator report the device, as a C++ extension would
    class Hooks(torch._C._acc.PrivateUse1Hooks):
        def is_available(self): return True
        def has_primary_context(self, dev_id): return True
        def is_built(self): return True
    torch._C._acc.register_python_privateuseone_hook(Hooks())

import anyaccel
from anyaccel.testing.conformance import CHECKS, run_conformance
acc = anyaccel.get_accelerator()
initialized_by_detection = module.initialized
report = run_conformance(acc, [c for c in CHECKS if c != "compile_backend"])
print(json.dumps({
    "class": type(acc).__name__, "name": acc._name, "count": acc.device_count(),
    "current": acc.current_device_name(), "visible": acc.visible_devices_envs(),
    "how": anyaccel.detection_report().how,
    "rows": [[p.name, p.decision] for p in anyaccel.detection_report().probes],
    "supported": anyaccel.is_current_accelerator_supported(),
    "initialized_by_detection": initialized_by_detection,
    "passed": report.passed, "report": report.format(),
    "forced": {forced: (os.environ.__setitem__("DS_ACCELERATOR", forced),
                        anyaccel.detect_accelerator()[1].accelerator)[1]
               for forced in ("simdev", "generic")},
}))
"""


_results: dict[str, dict[str, object]] = {}


def _run(name: str, mode: str) -> dict[str, object]:
    if mode in _results:
        return _results[mode]
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    done = subprocess.run(
        [sys.executable, "-c", _PRIVATEUSE1, name, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    _results[mode] = result
    return result


# Python-side PrivateUse1 hooks (what lets torch.accelerator report the device) are newer
# than torch 2.4; older torch runs the rename-only scenario.
_HOOKS = pytest.mark.skipif(
    not hasattr(getattr(torch._C, "_acc", None), "PrivateUse1Hooks"),
    reason=f"torch {torch.__version__} has no Python PrivateUse1 hooks (torch._C._acc)",
)


@pytest.mark.slow
@pytest.mark.parametrize("mode", [pytest.param("hook", marks=_HOOKS), "rename-only"])
def test_privateuse1_device_is_detected_and_passes_the_kit(mode: str) -> None:
    result = _run("simdev", mode)
    assert (result["class"], result["name"], result["count"]) == ("GenericAccelerator", "simdev", 3)
    assert result["current"] == "simdev:0"
    assert result["visible"] == ["SIMDEV_VISIBLE_DEVICES"]
    assert result["supported"] is True
    assert ["generic", "selected"] in result["rows"]
    assert "simdev" in [row[0] for row in result["rows"]]  # its own name is registered too
    assert result["initialized_by_detection"] is False
    assert result["passed"], result["report"]


@pytest.mark.slow
def test_privateuse1_device_can_be_forced_by_its_name_or_generic() -> None:
    result = _run("simdev", "rename-only")
    assert result["forced"] == {"simdev": "simdev", "generic": "simdev"}


def test_probe_without_any_torch_device_says_not_installed() -> None:
    with simulate_cpu_only_torch():
        outcome = generic.probe()
    assert outcome.kind == "not_installed"
    assert "no PrivateUse1 backend is renamed" in outcome.reason


def test_torch_without_torch_accelerator_falls_back_to_privateuse1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(torch, "accelerator", raising=False)  # absent before torch 2.6
    monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", lambda: "oldvendor")
    assert generic.torch_device_type() == ("oldvendor", "PrivateUse1")
    outcome = generic.probe()
    assert outcome.kind == "broken"
    assert "no torch.oldvendor module" in outcome.reason


def test_old_torch_without_any_device_degrades_to_not_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(torch, "accelerator", raising=False)  # absent before torch 2.6
    device_type, reason = generic.torch_device_type()
    assert device_type is None
    assert "no torch.accelerator" in reason


def test_device_with_no_devices_is_no_device(monkeypatch: pytest.MonkeyPatch) -> None:
    with simulate_cuda(device_count=0):
        monkeypatch.setattr(generic, "torch_device_type", lambda: ("cuda", "torch.accelerator"))
        outcome = generic.probe()
    assert outcome.kind == "no_device"


def test_alias_candidate_only_for_names_no_backend_has(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generic, "torch_device_type", lambda: ("foo", "PrivateUse1"))
    alias = generic.device_alias_candidate({"cuda", "cpu"})
    assert alias is not None
    assert (alias.name, alias.priority) == ("foo", generic.GENERIC_PRIORITY)
    assert generic.device_alias_candidate({"foo"}) is None


def test_creating_it_without_a_device_names_the_remedy() -> None:
    with (
        simulate_cpu_only_torch(),
        pytest.raises(AcceleratorUnavailableError, match="vendor's PyTorch extension"),
    ):
        GenericAccelerator()


def test_drives_a_torch_cuda_shaped_module() -> None:
    with simulate_cuda(device_count=2) as cuda:
        acc = GenericAccelerator("cuda", torch.cuda)
        acc.set_device(1)
        assert acc.current_device_name() == "cuda:1"
        cuda.allocate(1000)
        assert acc.memory_allocated() == 1000
        assert acc.total_memory() == 16 * 1024**3
        assert acc.communication_backend_name() == "nccl"
