"""PrivateUse1 vendor packages (mlu, sdaa, supa, musa): installed as ``torch.<vendor>``."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable

import pytest
import torch

from anyaccel.testing.simulated import (
    SimulatedDeviceModule,
    simulate_mlu,
    simulate_musa,
    simulate_sdaa,
    simulate_supa,
)

#: (simulation, device type, graph class or None, profiler or None)
VENDORS: list[
    tuple[
        Callable[[int], contextlib.AbstractContextManager[SimulatedDeviceModule]],
        str,
        str | None,
        str | None,
    ]
] = [
    (simulate_mlu, "mlu", "MLUGraph", "cnpx"),
    (simulate_sdaa, "sdaa", None, None),
    (simulate_supa, "supa", "SUPAGraph", None),
    (simulate_musa, "musa", "MUSAGraph", None),
]


@pytest.mark.parametrize(("simulate", "device_type", "graph", "profiler"), VENDORS)
def test_the_package_attaches_its_device_module(
    simulate: Callable[[int], contextlib.AbstractContextManager[SimulatedDeviceModule]],
    device_type: str,
    graph: str | None,
    profiler: str | None,
    interpreter_state: Callable[[], object],
) -> None:
    before = interpreter_state()
    with simulate(2) as module:
        assert getattr(torch, device_type) is module and module.device_count() == 2
        assert getattr(sys.modules[f"torch_{device_type}"], device_type) is module
        assert module.__name__ == f"torch_{device_type}.{device_type}"
        assert hasattr(module, graph or "graph") is (graph is not None)
        assert profiler is None or hasattr(module, profiler)
    assert interpreter_state() == before


def test_supa_answers_as_torch_cuda_by_default() -> None:
    with simulate_supa() as module:
        assert torch.cuda is module and torch.version.cuda == "12.1"  # type: ignore[comparison-overlap]
    with simulate_supa(cuda_compat=False) as module:
        assert torch.cuda is not module  # type: ignore[comparison-overlap]


def test_musa_answers_as_torch_cuda_only_with_its_compat_layer() -> None:
    with simulate_musa() as module:
        assert torch.cuda is not module  # type: ignore[comparison-overlap]
    with simulate_musa(cuda_compat=True) as module:
        assert torch.cuda is module and torch.backends.cuda.is_built() is True  # type: ignore[comparison-overlap, no-untyped-call]
