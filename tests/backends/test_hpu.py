"""The hpu backend against a simulated habana_frameworks (eager and lazy mode)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from vendor_contract import GENERIC, Case, cases, check_case

from anyaccel.backends import hpu
from anyaccel.backends.hpu import LAZY_MODE_DEFAULTS, HpuAccelerator
from anyaccel.testing.simulated import SimulatedDeviceModule, SimulatedGraph, simulate_hpu

_NONE = GENERIC["empty_cache"].check

HPU_CASES = cases(
    None,
    empty_cache=Case("empty_cache", None, _NONE),
    reset_max_memory_allocated=Case("reset_max_memory_allocated", "reset_peak_memory_stats", _NONE),
    reset_max_memory_cached=Case("reset_max_memory_cached", "reset_peak_memory_stats", _NONE),
    total_memory=Case("total_memory", "memory_stats", GENERIC["total_memory"].check),
    is_bf16_supported=Case("is_bf16_supported", None, lambda v: v is True),
)  # fmt: skip


@pytest.fixture
def gaudi(monkeypatch: pytest.MonkeyPatch) -> Iterator[SimulatedDeviceModule]:
    for name in LAZY_MODE_DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    with simulate_hpu() as module:
        yield module


@pytest.mark.parametrize("case", HPU_CASES, ids=str)
def test_contract_method_reaches_habana_hpu(gaudi: SimulatedDeviceModule, case: Case) -> None:
    check_case(HpuAccelerator(), gaudi, case)


def test_data_sheet_matches_gaudi(gaudi: SimulatedDeviceModule) -> None:
    acc = HpuAccelerator()
    assert acc.communication_backend_name() == "hccl"
    assert acc.get_compile_backend() == "hpu_backend"
    assert acc.visible_devices_envs() == ["HABANA_VISIBLE_MODULES"]
    assert acc.export_envs() == []
    assert acc.resolves_data_dependency() and acc.handles_memory_backpressure()


def test_device_names_carry_no_index(gaudi: SimulatedDeviceModule) -> None:
    acc = HpuAccelerator()
    assert acc.device_name(3) == "hpu" and acc.device(3).type == "hpu"


def test_total_memory_is_the_allocator_limit(gaudi: SimulatedDeviceModule) -> None:
    assert HpuAccelerator().total_memory() == 96 * 1024**3


def test_lazy_mode_defaults_fill_only_unset_variables(
    gaudi: SimulatedDeviceModule, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PT_HPU_LAZY_ACC_PAR_MODE", "1")
    HpuAccelerator()
    assert hpu.os.environ["PT_HPU_LAZY_ACC_PAR_MODE"] == "1"
    assert hpu.os.environ["PT_HPU_ENABLE_REFINE_DYNAMIC_SHAPES"] == "0"


def test_fp16_follows_habana_experimental(monkeypatch: pytest.MonkeyPatch) -> None:
    with simulate_hpu(fp16=False):
        acc = HpuAccelerator()
        assert not acc.is_fp16_supported()
        assert acc.supported_dtypes() == [hpu.torch.float32, hpu.torch.bfloat16]


def test_lazy_mode_graphs_capture_and_replay() -> None:
    with simulate_hpu(lazy_mode=True):
        acc = HpuAccelerator()
        graph = acc.create_graph()
        with acc.capture_to_graph(graph, pool=object()):
            pass
        acc.replay_graph(graph)
    assert isinstance(graph, SimulatedGraph) and graph.replays == 1


def test_eager_mode_graphs_are_no_ops(gaudi: SimulatedDeviceModule) -> None:
    acc = HpuAccelerator()
    graph = acc.create_graph()
    with acc.capture_to_graph(graph):
        pass
    acc.replay_graph(graph)
    assert not isinstance(graph, SimulatedGraph)


def test_visible_modules_untouched_when_unset(gaudi: SimulatedDeviceModule) -> None:
    env: dict[str, str] = {}
    HpuAccelerator().set_visible_devices_envs(env, [0, 1])
    assert env == {}


@pytest.mark.parametrize(
    ("ids", "expected"),
    [([0, 1], "1,4"), ([4, 2], "4,2"), (["5"], "5")],
    ids=["positions", "module-ids", "string-module-id"],
)
def test_visible_modules_map_positions_and_keep_module_ids(
    gaudi: SimulatedDeviceModule, ids: list[int | str], expected: str
) -> None:
    env = {"HABANA_VISIBLE_MODULES": "1,4,5,2"}
    HpuAccelerator().set_visible_devices_envs(env, ids)
    assert env["HABANA_VISIBLE_MODULES"] == expected


def test_visible_modules_reject_ids_that_fit_neither(gaudi: SimulatedDeviceModule) -> None:
    with pytest.raises(ValueError, match="neither module ids"):
        HpuAccelerator().set_visible_devices_envs({"HABANA_VISIBLE_MODULES": "1,4"}, [7])


def test_probe_counts_gaudis_without_initialising(gaudi: SimulatedDeviceModule) -> None:
    outcome = hpu.probe()
    assert outcome.available and gaudi.initialized is False


def test_probe_without_habana_says_not_installed() -> None:
    assert hpu.probe().kind == "not_installed"
