"""The sdaa backend against a simulated torch_sdaa (Tecorigin)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from vendor_contract import Case, cases, check_case

from anyaccel.backends import sdaa
from anyaccel.backends.sdaa import SdaaAccelerator
from anyaccel.testing.simulated import SimulatedDeviceModule, simulate_sdaa


@pytest.fixture
def runtime() -> Iterator[SimulatedDeviceModule]:
    with simulate_sdaa(device_count=2) as module:
        yield module


@pytest.mark.parametrize("case", cases(None), ids=str)
def test_contract_method_reaches_torch_sdaa(runtime: SimulatedDeviceModule, case: Case) -> None:
    check_case(SdaaAccelerator(), runtime, case)


def test_data_sheet_matches_sdaa(runtime: SimulatedDeviceModule) -> None:
    acc = SdaaAccelerator()
    assert acc.communication_backend_name() == "tccl"
    assert acc.visible_devices_envs() == ["SDAA_VISIBLE_DEVICES"]
    assert acc.export_envs() == ["NCCL", "LD_LIBRARY", "PATH"]
    assert acc.device_name(1) == "sdaa:1" and acc.current_device_name() == "sdaa:0"


def test_probe_counts_devices_without_initialising(runtime: SimulatedDeviceModule) -> None:
    outcome = sdaa.probe()
    assert outcome.available and outcome.device_count == 2
    assert runtime.initialized is False


def test_probe_without_devices_says_no_device() -> None:
    with simulate_sdaa(device_count=0):
        assert sdaa.probe().kind == "no_device"


def test_probe_without_the_package_says_not_installed() -> None:
    assert sdaa.probe().kind == "not_installed"
