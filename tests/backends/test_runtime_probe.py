"""When a vendor runtime itself fails, errors quote it and give the vendor's remedy."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest

import anyaccel
from anyaccel.detection import detect_accelerator
from anyaccel.errors import AcceleratorUnavailableError
from anyaccel.testing import simulated

_BROKEN = "driver/library version mismatch (simulated)"

#: (DS_ACCELERATOR, the simulated runtime, the vendor's status command, the stack to check)
RUNTIMES: list[tuple[str, Callable[[], Any], str, str]] = [
    ("cuda", simulated.simulate_cuda, "`nvidia-smi`", "NVIDIA driver and CUDA runtime"),
    ("cuda", lambda: simulated.simulate_cuda(hip="6.2"), "`rocm-smi`", "AMD GPU driver and ROCm"),
    ("npu", simulated.simulate_npu, "`npu-smi info`", "CANN toolkit"),
    ("xpu", lambda: simulated.simulate_xpu(path="ipex"), "`xpu-smi discovery`", "Level Zero"),
    ("hpu", simulated.simulate_hpu, "`hl-smi`", "Intel Gaudi driver"),
    ("mlu", simulated.simulate_mlu, "`cnmon`", "Neuware"),
    ("sdaa", simulated.simulate_sdaa, "`teco-smi`", "Tecorigin SDAA driver"),
    ("supa", simulated.simulate_supa, "BR-SMI", "BIRENSUPA driver"),
    ("musa", simulated.simulate_musa, "`mthreads-gmi`", "MUSA toolkit"),
    ("klxpu", simulated.simulate_klxpu, "`xpu_smi`", "Kunlunxin XPU driver"),
]


def _raise() -> int:
    raise RuntimeError(_BROKEN)


@contextlib.contextmanager
def failing(runtime: Callable[[], Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    with runtime() as module:
        monkeypatch.setattr(module, "device_count", _raise)
        yield module


@pytest.mark.parametrize(("name", "runtime", "command", "stack"), RUNTIMES)
def test_forced_backend_whose_runtime_fails_quotes_it_and_names_the_vendor_check(
    monkeypatch: pytest.MonkeyPatch, name: str, runtime: Callable[[], Any], command: str, stack: str
) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", name)
    with failing(runtime, monkeypatch), pytest.raises(AcceleratorUnavailableError) as info:
        anyaccel.get_accelerator()
    message = str(info.value)
    assert info.value.kind == "broken"
    assert f"RuntimeError: {_BROKEN}" in message
    assert command in message and stack in message
    assert "The vendor runtime itself failed (not anyaccel)" in message
    assert "Report this to whoever" not in message


@pytest.mark.parametrize(("name", "runtime", "command", "stack"), RUNTIMES)
def test_the_trace_quotes_the_failing_runtime_and_detection_goes_on(
    monkeypatch: pytest.MonkeyPatch, name: str, runtime: Callable[[], Any], command: str, stack: str
) -> None:
    with failing(runtime, monkeypatch):
        acc, report = detect_accelerator(probe_all=True)
    broken = [p for p in report.probes if p.name == name and p.kind == "broken"]
    assert broken, [(p.candidate, p.kind, p.reason) for p in report.probes]
    assert f"device_count() raised RuntimeError: {_BROKEN}" in broken[0].reason
    assert acc is not None


def test_a_generic_device_whose_runtime_fails_points_at_the_vendor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from anyaccel.backends import generic

    class Broken:
        def device_count(self) -> int:
            return _raise()

    monkeypatch.setattr(generic, "torch_device_type", lambda: ("foo", "PrivateUse1"))
    monkeypatch.setattr(generic, "_device_module", lambda _type: Broken())
    outcome = generic.probe()
    assert outcome.kind == "broken"
    assert f"torch.foo.device_count() raised RuntimeError: {_BROKEN}" in outcome.reason
    assert "the vendor's own status tool" in outcome.remedy
