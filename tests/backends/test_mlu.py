"""The mlu backend against a simulated torch_mlu (Cambricon)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from vendor_contract import Case, cases, check_case

from anyaccel.backends import mlu
from anyaccel.backends.mlu import MluAccelerator
from anyaccel.testing.simulated import SimulatedDeviceModule, simulate_mlu


@pytest.fixture
def runtime() -> Iterator[SimulatedDeviceModule]:
    with simulate_mlu(device_count=2) as module:
        yield module


@pytest.mark.parametrize("case", cases("MLUGraph"), ids=str)
def test_contract_method_reaches_torch_mlu(runtime: SimulatedDeviceModule, case: Case) -> None:
    check_case(MluAccelerator(), runtime, case)


def test_data_sheet_matches_mlu(runtime: SimulatedDeviceModule) -> None:
    acc = MluAccelerator()
    assert acc.communication_backend_name() == "cncl"
    assert acc.visible_devices_envs() == ["MLU_VISIBLE_DEVICES"]
    assert acc.export_envs() == ["NEUWARE_HOME", "CNCL", "LD_LIBRARY", "PATH"]
    assert acc.device_name(1) == "mlu:1" and acc.current_device_name() == "mlu:0"


def test_probe_counts_devices_without_initialising(runtime: SimulatedDeviceModule) -> None:
    outcome = mlu.probe()
    assert outcome.available and outcome.device_count == 2
    assert runtime.initialized is False


def test_probe_without_devices_says_no_device() -> None:
    with simulate_mlu(device_count=0):
        assert mlu.probe().kind == "no_device"


def test_probe_without_the_package_says_not_installed() -> None:
    assert mlu.probe().kind == "not_installed"


def test_range_push_and_pop_use_cnpx(runtime: SimulatedDeviceModule) -> None:
    acc = mlu.MluAccelerator()
    acc.range_push("step")
    assert runtime.cnpx.stack == ["step"]
    acc.range_pop()
    assert runtime.cnpx.stack == []


def test_graphs_capture_and_replay(runtime: SimulatedDeviceModule) -> None:
    acc = mlu.MluAccelerator()
    graph = acc.create_graph()
    with acc.capture_to_graph(graph):
        assert acc.is_current_stream_capturing()
    acc.replay_graph(graph)
    assert graph.replays == 1


def test_initial_seed_takes_no_argument(runtime: SimulatedDeviceModule) -> None:
    acc = mlu.MluAccelerator()
    acc.manual_seed(1234)
    assert acc.initial_seed() == 1234
