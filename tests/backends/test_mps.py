"""The mps backend against a simulated torch.mps: one device, its own memory functions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from vendor_contract import GENERIC, Case, cases, check_case

from anyaccel.backends import mps
from anyaccel.backends.mps import MpsAccelerator
from anyaccel.testing.simulated import SimulatedDeviceModule, simulate_mps

_INT = GENERIC["memory_allocated"].check
_NONE = GENERIC["empty_cache"].check
_GENERATOR = GENERIC["default_generator"].check
_ALLOCATED = "current_allocated_memory"

MPS_CASES = cases(
    None,
    device_count=Case("device_count", None, lambda v: v == 1),
    current_device=Case("current_device", None, lambda v: v == 0),
    set_device=Case("set_device", None, _NONE, (0,)),
    is_available=Case("is_available", None, lambda v: v is True),
    manual_seed_all=Case("manual_seed_all", "manual_seed", _NONE, (7,)),
    initial_seed=Case("initial_seed", "_get_default_mps_generator", _INT),
    default_generator=Case("default_generator", "_get_default_mps_generator", _GENERATOR, (0,)),
    current_stream=Case("current_stream", None, lambda v: v is not None),
    default_stream=Case("default_stream", None, lambda v: v is not None),
    stream=Case("stream", None, GENERIC["stream"].check, (None,)),
    memory_allocated=Case("memory_allocated", "current_allocated_memory", _INT),
    max_memory_allocated=Case("max_memory_allocated", "current_allocated_memory", _INT),
    reset_max_memory_allocated=Case("reset_max_memory_allocated", _ALLOCATED, _NONE),
    memory_cached=Case("memory_cached", "driver_allocated_memory", _INT),
    max_memory_cached=Case("max_memory_cached", "driver_allocated_memory", _INT),
    reset_max_memory_cached=Case("reset_max_memory_cached", "driver_allocated_memory", _NONE),
    memory_stats=Case("memory_stats", "current_allocated_memory", lambda v: isinstance(v, dict)),
    reset_peak_memory_stats=Case("reset_peak_memory_stats", "driver_allocated_memory", _NONE),
    memory_reserved=Case("memory_reserved", "driver_allocated_memory", _INT),
    max_memory_reserved=Case("max_memory_reserved", "driver_allocated_memory", _INT),
    total_memory=Case("total_memory", "recommended_max_memory", _INT),
    available_memory=Case("available_memory", "recommended_max_memory", _INT),
    is_bf16_supported=Case("is_bf16_supported", None, lambda v: v is True),
    lazy_call=Case("lazy_call", None, _NONE, (lambda: None,)),
    is_current_stream_capturing=Case("is_current_stream_capturing", None, lambda v: v is False),
)  # fmt: skip


@pytest.fixture
def apple_gpu() -> Iterator[SimulatedDeviceModule]:
    with simulate_mps() as module:
        yield module


@pytest.mark.parametrize("case", MPS_CASES, ids=str)
def test_contract_method_reaches_torch_mps(apple_gpu: SimulatedDeviceModule, case: Case) -> None:
    check_case(MpsAccelerator(), apple_gpu, case)


def test_data_sheet_matches_apple(apple_gpu: SimulatedDeviceModule) -> None:
    acc = MpsAccelerator()
    assert acc.communication_backend_name() == "gloo"
    assert acc.use_host_timers() and not acc.is_fp64_supported()
    assert acc.current_device_name() == "mps:0"


def test_only_device_zero_exists(apple_gpu: SimulatedDeviceModule) -> None:
    with pytest.raises(ValueError, match="one device"):
        MpsAccelerator().set_device(1)


def test_peaks_are_the_highest_values_read(apple_gpu: SimulatedDeviceModule) -> None:
    acc = MpsAccelerator()
    apple_gpu.allocate(1000, 0)
    acc.memory_allocated()
    apple_gpu.free(1000, 0)
    assert acc.memory_allocated() == 0 and acc.max_memory_allocated() == 1000
    acc.reset_peak_memory_stats()
    assert acc.max_memory_allocated() == 0


def test_pin_memory_returns_the_tensor_itself(apple_gpu: SimulatedDeviceModule) -> None:
    tensor = torch.ones(4)
    assert MpsAccelerator().pin_memory(tensor) is tensor


def test_bf16_needs_macos_14() -> None:
    with simulate_mps(macos=(13, 6)):
        assert MpsAccelerator().supported_dtypes() == [torch.float32, torch.float16]


def test_probe_reports_a_build_without_mps() -> None:
    with simulate_mps(built=False):
        assert mps.probe().kind == "not_installed"


def test_probe_reports_an_unusable_mac() -> None:
    with simulate_mps(available=False):
        assert mps.probe().kind == "no_device"
