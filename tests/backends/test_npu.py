"""The npu backend against a simulated torch_npu, and its probe against broken installs."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from vendor_contract import Case, cases, check_case

import anyaccel
from anyaccel.backends import npu
from anyaccel.backends.npu import NpuAccelerator
from anyaccel.errors import AcceleratorUnavailableError
from anyaccel.testing.simulated import (
    SimulatedDeviceModule,
    simulate_npu,
    simulate_npu_without_cann,
)


@pytest.fixture
def torch_npu() -> Iterator[SimulatedDeviceModule]:
    with simulate_npu(device_count=2) as module:
        yield module


@pytest.mark.parametrize("case", cases("NPUGraph"), ids=str)
def test_contract_method_reaches_torch_npu(torch_npu: SimulatedDeviceModule, case: Case) -> None:
    check_case(NpuAccelerator(), torch_npu, case)


def test_data_sheet_matches_ascend() -> None:
    acc = NpuAccelerator.__new__(NpuAccelerator)
    assert acc.communication_backend_name() == "hccl"
    assert acc.visible_devices_envs() == ["ASCEND_RT_VISIBLE_DEVICES"]
    assert acc.export_envs() == ["ASCEND", "HCCL", "LD_LIBRARY", "PATH"]
    assert acc.pin_memory_alignment() == 4096


def test_register_host_memory_maps_through_npurt(torch_npu: SimulatedDeviceModule) -> None:
    acc = NpuAccelerator()
    assert acc.register_host_memory(4096 * 3, 8192) is True
    runtime = torch_npu.npurt()
    assert runtime.registered == {4096 * 3: 8192}
    assert acc.unregister_host_memory(4096 * 3) is True
    assert acc.unregister_host_memory(4096 * 3) is False


def test_range_push_and_pop_use_mstx_range_start_and_end(torch_npu: SimulatedDeviceModule) -> None:
    acc = NpuAccelerator()
    outer = acc.range_push("forward")
    inner = acc.range_push("attention")
    assert torch_npu.mstx.open == {outer: "forward", inner: "attention"}
    assert acc.range_pop() == inner and torch_npu.mstx.closed == ["attention"]
    assert acc.range_pop() == outer and torch_npu.mstx.closed == ["attention", "forward"]
    assert torch_npu.mstx.open == {} and acc.range_pop() is None  # nothing left to close


def test_a_range_mstx_refuses_is_not_closed(torch_npu: SimulatedDeviceModule) -> None:
    acc = NpuAccelerator()
    with pytest.warns(UserWarning, match="non-empty message"):
        assert acc.range_push("") == 0
    assert acc.range_pop() == 0 and torch_npu.mstx.closed == []


def test_the_simulated_mstx_is_torch_npus_api(torch_npu: SimulatedDeviceModule) -> None:
    mstx = torch_npu.mstx
    assert not hasattr(mstx, "range_push") and not hasattr(mstx, "range_pop")
    mstx.mark("step")
    assert mstx.marks == ["step"]
    range_id = mstx.range_start("load", stream=None)
    assert range_id != 0 and mstx.open == {range_id: "load"}
    mstx.range_end(range_id)
    assert mstx.closed == ["load"]


def test_missing_device_capability_does_not_break_dtypes(torch_npu: SimulatedDeviceModule) -> None:
    acc = NpuAccelerator()
    assert torch_npu.get_device_capability() is None
    assert acc.supported_dtypes() == [npu.torch.float32, npu.torch.float16, npu.torch.bfloat16]


def test_probe_counts_devices_without_initialising(torch_npu: SimulatedDeviceModule) -> None:
    outcome = npu.probe()
    assert outcome.available and outcome.device_count == 2
    assert torch_npu.initialized is False


def test_probe_without_devices_says_no_device() -> None:
    with simulate_npu(device_count=0):
        outcome = npu.probe()
    assert outcome.kind == "no_device"


@pytest.mark.parametrize("exit_on_import", [False, True], ids=["import-error", "sys-exit"])
def test_probe_without_cann_is_broken_and_names_the_library(exit_on_import: bool) -> None:
    with simulate_npu_without_cann(exit_on_import=exit_on_import):
        outcome = npu.probe()
    assert outcome.kind == "broken"
    assert "CANN" in outcome.reason and "libhccl.so" in outcome.reason
    assert "set_env.sh" in outcome.remedy


def test_failed_import_restores_the_autoload_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_DEVICE_BACKEND_AUTOLOAD", "1")
    with simulate_npu_without_cann():
        npu.probe()
        assert os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "1"


def test_forcing_npu_without_cann_reports_the_missing_library(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "npu")
    with simulate_npu_without_cann(), pytest.raises(AcceleratorUnavailableError) as raised:
        anyaccel.get_accelerator()
    assert raised.value.kind == "broken"
    assert "libhccl.so" in str(raised.value) and "not installed" not in str(raised.value)


def test_forcing_npu_when_absent_says_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "npu")
    with pytest.raises(AcceleratorUnavailableError) as raised:
        anyaccel.get_accelerator()
    assert raised.value.kind == "not_installed"
    assert "pip install torch-npu" in str(raised.value)
