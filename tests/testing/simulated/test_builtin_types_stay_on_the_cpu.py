"""cuda, xpu and hpu are torch's own device types: their simulations are API-level, and say so.

PrivateUse1 cannot take their names, so no emulated device stands in for them. Whatever their
simulated runtimes hand out that holds numbers (generators, their draws, RNG states) is on the
CPU, and making a tensor on the simulated device fails with torch's own error: nothing pretends
a tensor lives on ``cuda:0``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest
import torch

from anyaccel.abstract import Accelerator
from anyaccel.backends.cuda import CudaAccelerator
from anyaccel.backends.hpu import HpuAccelerator
from anyaccel.backends.xpu import XpuAccelerator
from anyaccel.testing.emulated import install
from anyaccel.testing.simulated import simulate_cuda, simulate_hpu, simulate_xpu

Simulate = Callable[[], AbstractContextManager[Any]]
BUILTIN: list[tuple[str, Simulate, type[Accelerator]]] = [
    ("cuda", simulate_cuda, CudaAccelerator),
    ("xpu", simulate_xpu, XpuAccelerator),
    ("hpu", simulate_hpu, HpuAccelerator),
]


@pytest.mark.parametrize(("device_type", "simulate", "backend"), BUILTIN)
def test_what_the_simulation_hands_out_is_on_the_cpu(
    device_type: str, simulate: Simulate, backend: type[Accelerator]
) -> None:
    with warnings.catch_warnings(), simulate():
        warnings.simplefilter("ignore")
        accelerator = backend()
        generator = accelerator.default_generator(0)
        assert generator.device == torch.device("cpu")
        assert torch.randn(2, generator=generator).device == torch.device("cpu")
        state = accelerator.get_rng_state()
        assert state.device == torch.device("cpu") and state.dtype == torch.uint8
        assert not accelerator.on_accelerator(torch.ones(1))


@pytest.mark.parametrize(("device_type", "simulate", "backend"), BUILTIN)
def test_a_tensor_on_the_simulated_device_fails_with_torchs_own_error(
    device_type: str, simulate: Simulate, backend: type[Accelerator]
) -> None:
    with warnings.catch_warnings(), simulate():
        warnings.simplefilter("ignore")
        with pytest.raises((RuntimeError, ImportError)):
            torch.zeros(1, device=backend().device_name(0))


@pytest.mark.parametrize("device_type", ["cuda", "xpu", "hpu"])
def test_no_emulated_device_takes_a_builtin_name(device_type: str) -> None:
    with pytest.raises(ValueError, match=f"device type '{device_type}' is torch's own"):
        install(device_type, 1)
