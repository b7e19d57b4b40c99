"""The klxpu backend against a simulated torch_xmlir (Kunlunxin XPUs as ``torch.cuda``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from vendor_contract import Case, cases, check_case

import anyaccel
from anyaccel.backends import klxpu
from anyaccel.backends.klxpu import KlxpuAccelerator
from anyaccel.detection import detect_accelerator
from anyaccel.errors import AcceleratorUnavailableError
from anyaccel.testing.simulated import SimulatedDeviceModule, simulate_klxpu


@pytest.fixture
def runtime() -> Iterator[SimulatedDeviceModule]:
    with simulate_klxpu(device_count=2) as module:
        yield module


@pytest.mark.parametrize("case", cases("CUDAGraph"), ids=str)
def test_contract_method_reaches_torch_cuda_of_torch_xmlir(
    runtime: SimulatedDeviceModule, case: Case
) -> None:
    check_case(KlxpuAccelerator(), runtime, case)


def test_data_sheet_matches_deepspeeds_klxpu(runtime: SimulatedDeviceModule) -> None:
    acc = KlxpuAccelerator()
    assert acc._name == "klxpu"
    assert acc.communication_backend_name() == "nccl"
    assert acc.visible_devices_envs() == ["CUDA_VISIBLE_DEVICES"]
    assert acc.export_envs() == ["BKCL", "XPU", "XMLIR", "LD_LIBRARY", "PATH"]
    assert acc.is_triton_supported() is False
    assert acc.prefer_triton_grouped_mm() is False


def test_device_strings_are_torchs_cuda_ones(runtime: SimulatedDeviceModule) -> None:
    acc = KlxpuAccelerator()
    assert acc.device_name() == "cuda" and acc.device_name(1) == "cuda:1"
    assert acc.current_device_name() == "cuda:0"
    assert acc.device(1) == torch.device("cuda", 1)
    assert acc.on_accelerator(torch.empty(0, device="meta")) is False


@pytest.mark.parametrize(("value", "host"), [(None, True), ("0", True), ("1", False)])
def test_host_timers_unless_device_event_timers_are_enabled(
    runtime: SimulatedDeviceModule, monkeypatch: pytest.MonkeyPatch, value: str | None, host: bool
) -> None:
    if value is None:
        monkeypatch.delenv("XPU_EVENT_KL3_ENABLE", raising=False)
    else:
        monkeypatch.setenv("XPU_EVENT_KL3_ENABLE", value)
    assert KlxpuAccelerator().use_host_timers() is host


def test_probe_counts_devices_without_initialising(runtime: SimulatedDeviceModule) -> None:
    outcome = klxpu.probe()
    assert outcome.available and outcome.device_count == 2
    assert "torch_xmlir" in outcome.reason
    assert runtime.initialized is False


def test_probe_without_devices_says_no_device() -> None:
    with simulate_klxpu(device_count=0):
        assert klxpu.probe().kind == "no_device"


def test_probe_without_the_package_says_not_installed() -> None:
    assert klxpu.probe().kind == "not_installed"


def test_detected_before_the_cuda_it_answers_as(runtime: SimulatedDeviceModule) -> None:
    acc, report = detect_accelerator(probe_all=True)
    assert type(acc) is KlxpuAccelerator
    rows = {p.name: p.decision for p in report.probes}
    assert rows["klxpu"] == "selected"
    assert rows["cuda"] == "available, lower priority"


def test_forced_with_ds_accelerator(
    runtime: SimulatedDeviceModule, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "klxpu")
    assert type(anyaccel.get_accelerator()) is KlxpuAccelerator
    assert anyaccel.detection_report().how == "DS_ACCELERATOR"
    assert "klxpu" in anyaccel.SUPPORTED_ACCELERATOR_LIST


def test_forced_without_torch_xmlir_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "klxpu")
    with pytest.raises(AcceleratorUnavailableError, match="torch_xmlir") as raised:
        anyaccel.get_accelerator()
    assert raised.value.kind == "not_installed"
