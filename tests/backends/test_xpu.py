"""The xpu backend's three paths against simulated Intel runtimes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from vendor_contract import GENERIC, Case, cases, check_case

import anyaccel
from anyaccel.abstract import Accelerator
from anyaccel.backends import xpu
from anyaccel.backends.xpu import IpexXpuAccelerator, XpuAccelerator
from anyaccel.detection import detect_accelerator
from anyaccel.testing.simulated import (
    SimulatedDeviceModule,
    patched_attributes,
    simulate_cuda,
    simulate_xpu,
)

_NONE = GENERIC["empty_cache"].check
_PEAKS = "reset_peak_memory_stats"
#: torch.xpu has no default stream that syncs like CUDA's: the current stream stands in.
_DEFAULT_STREAM = Case("default_stream", "current_stream", GENERIC["current_stream"].check)
NATIVE_CASES = cases(
    "XPUGraph",
    reset_max_memory_allocated=Case("reset_max_memory_allocated", _PEAKS, _NONE),
    reset_max_memory_cached=Case("reset_max_memory_cached", _PEAKS, _NONE),
    default_stream=_DEFAULT_STREAM,
)


@pytest.fixture
def native_xpu() -> Iterator[SimulatedDeviceModule]:
    with simulate_xpu(device_count=2, path="native") as module:
        yield module


@pytest.mark.parametrize("case", NATIVE_CASES, ids=str)
def test_contract_method_reaches_native_torch_xpu(
    native_xpu: SimulatedDeviceModule, case: Case
) -> None:
    check_case(XpuAccelerator(), native_xpu, case)


@pytest.mark.parametrize("case", cases("XPUGraph", default_stream=_DEFAULT_STREAM), ids=str)
def test_contract_method_reaches_ipex_torch_xpu(case: Case) -> None:
    with simulate_xpu(device_count=2, path="ipex") as module:
        check_case(IpexXpuAccelerator(), module, case)


def test_collectives_use_xccl_without_oneccl_bindings(native_xpu: SimulatedDeviceModule) -> None:
    assert XpuAccelerator().communication_backend_name() == "xccl"


def test_data_sheet_matches_intel() -> None:
    acc = XpuAccelerator.__new__(XpuAccelerator)
    assert acc.visible_devices_envs() == ["ZE_AFFINITY_MASK"]
    assert acc.export_envs() == []


def test_ipex_build_extension_is_dpcpp() -> None:
    with simulate_xpu(path="ipex"):
        assert IpexXpuAccelerator().build_extension().__name__ == "DpcppBuildExtension"


def test_native_xpu_is_detected_without_initialising(native_xpu: SimulatedDeviceModule) -> None:
    acc, report = detect_accelerator()
    assert type(acc) is XpuAccelerator
    assert report.probes[2].decision == "selected" and native_xpu.initialized is False


def test_native_xpu_yields_to_a_visible_cuda_device() -> None:
    with simulate_xpu(path="native"), simulate_cuda(device_count=1):
        acc, report = detect_accelerator()
    assert acc._name == "cuda"
    native = next(p for p in report.probes if p.candidate == "xpu (native torch.xpu)")
    assert "CUDA" in native.reason and native.decision == "passed over"


def test_forcing_xpu_takes_native_xpu_even_beside_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "xpu")
    with simulate_xpu(path="native"), simulate_cuda(device_count=1):
        assert type(anyaccel.get_accelerator()) is XpuAccelerator


def test_native_xpu_needs_torch_2_8() -> None:
    with simulate_xpu(path="native"), patched_attributes((torch, "__version__", "2.7.1")):
        outcome = xpu.probe_native()
    assert outcome.kind == "not_installed" and "2.8" in outcome.reason


def test_ipex_wins_over_native_xpu() -> None:
    with simulate_xpu(path="ipex"):
        acc, _ = detect_accelerator()
    assert type(acc) is IpexXpuAccelerator


def test_external_accelerator_is_used_as_it_is() -> None:
    with simulate_xpu(path="external"):
        acc, report = detect_accelerator()
        assert type(acc).__module__ == "anyaccel.testing.simulated.xpu"
        assert isinstance(acc, Accelerator) and report.probes[0].decision == "selected"
        assert acc.pin_memory_alignment() == 1  # a newer member bound from anyaccel's defaults
        assert acc.device_count() == 1


def test_old_external_release_is_passed_over_with_missing_members() -> None:
    with simulate_xpu(path="external", old_external_release=True):
        acc, report = detect_accelerator()
    assert type(acc) is IpexXpuAccelerator
    assert "lacks" in report.probes[0].reason and "create_graph" in report.probes[0].reason


def test_ds_accelerator_accepts_xpu_external(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "xpu.external")
    with simulate_xpu(path="external"):
        assert anyaccel.get_accelerator()._name == "xpu"


def test_the_simulated_capability_is_a_dict_of_properties_as_torch_xpus(
    native_xpu: SimulatedDeviceModule,
) -> None:
    capability = native_xpu.get_device_capability(1)
    assert isinstance(capability, dict)
    major, minor, *_ = capability["version"].split(".")  # how callers read it (vLLM does)
    assert int(major) >= 0 and int(minor) >= 0
    properties = native_xpu.get_device_properties(1)
    assert capability["name"] == properties.name and not hasattr(properties, "major")
    assert XpuAccelerator().total_memory(1) == capability["total_memory"]
