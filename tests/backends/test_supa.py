"""The supa backend against a simulated torch_supa (Biren)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from vendor_contract import Case, cases, check_case

from anyaccel.backends import supa
from anyaccel.backends.supa import SupaAccelerator
from anyaccel.testing.simulated import SimulatedDeviceModule, simulate_supa


@pytest.fixture
def runtime() -> Iterator[SimulatedDeviceModule]:
    with simulate_supa(device_count=2) as module:
        yield module


@pytest.mark.parametrize("case", cases("SUPAGraph"), ids=str)
def test_contract_method_reaches_torch_supa(runtime: SimulatedDeviceModule, case: Case) -> None:
    check_case(SupaAccelerator(), runtime, case)


def test_data_sheet_matches_supa(runtime: SimulatedDeviceModule) -> None:
    acc = SupaAccelerator()
    assert acc.communication_backend_name() == "bccl"
    assert acc.visible_devices_envs() == ["SUPA_VISIBLE_DEVICES"]
    assert acc.export_envs() == ["BCCL", "BIREN", "SUPA", "LD_LIBRARY", "PATH"]
    assert acc.device_name(1) == "supa:1" and acc.current_device_name() == "supa:0"


def test_probe_counts_devices_without_initialising(runtime: SimulatedDeviceModule) -> None:
    outcome = supa.probe()
    assert outcome.available and outcome.device_count == 2
    assert runtime.initialized is False


def test_probe_without_devices_says_no_device() -> None:
    with simulate_supa(device_count=0):
        assert supa.probe().kind == "no_device"


def test_probe_without_the_package_says_not_installed() -> None:
    assert supa.probe().kind == "not_installed"


def test_collectives_fall_back_to_gloo_on_windows(
    runtime: SimulatedDeviceModule, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supa.sys, "platform", "win32")
    assert supa.SupaAccelerator().communication_backend_name() == "gloo"
