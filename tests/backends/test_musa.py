"""The musa backend against a simulated torch_musa (Moore Threads)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from vendor_contract import Case, cases, check_case

from anyaccel.backends import musa
from anyaccel.backends.musa import MusaAccelerator
from anyaccel.testing.simulated import SimulatedDeviceModule, simulate_musa


@pytest.fixture
def runtime() -> Iterator[SimulatedDeviceModule]:
    with simulate_musa(device_count=2) as module:
        yield module


@pytest.mark.parametrize("case", cases("MUSAGraph"), ids=str)
def test_contract_method_reaches_torch_musa(runtime: SimulatedDeviceModule, case: Case) -> None:
    check_case(MusaAccelerator(), runtime, case)


def test_data_sheet_matches_musa(runtime: SimulatedDeviceModule) -> None:
    acc = MusaAccelerator()
    assert acc.communication_backend_name() == "mccl"
    assert acc.visible_devices_envs() == ["MUSA_VISIBLE_DEVICES"]
    assert acc.export_envs() == ["MUSA_HOME", "MCCL", "LD_LIBRARY", "PATH"]
    assert acc.device_name(1) == "musa:1" and acc.current_device_name() == "musa:0"


def test_probe_counts_devices_without_initialising(runtime: SimulatedDeviceModule) -> None:
    outcome = musa.probe()
    assert outcome.available and outcome.device_count == 2
    assert runtime.initialized is False


def test_probe_without_devices_says_no_device() -> None:
    with simulate_musa(device_count=0):
        assert musa.probe().kind == "no_device"


def test_probe_without_the_package_says_not_installed() -> None:
    assert musa.probe().kind == "not_installed"


def test_graphs_are_musa_graphs_captured_with_torch_musa_graph(
    runtime: SimulatedDeviceModule,
) -> None:
    acc = MusaAccelerator()
    graph = acc.create_graph()
    assert "MUSAGraph" in runtime.calls
    with acc.capture_to_graph(graph):
        pass
    assert "graph" in runtime.calls and graph.captured is True
    acc.replay_graph(graph)
    assert graph.replays == 1
