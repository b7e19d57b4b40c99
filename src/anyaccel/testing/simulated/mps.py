"""torch.mps (Apple silicon): one device, no device arguments, its own memory functions."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from anyaccel.testing.simulated.device_module import SimulatedDeviceModule
from anyaccel.testing.simulated.patching import installed

__all__ = ["MPS_MISSING", "SimulatedMpsModule", "simulate_mps"]

#: ``torch.cuda`` names that ``torch.mps`` does not have.
MPS_MISSING = frozenset(
    {
        "set_device", "current_device", "get_device_name", "get_device_capability",
        "get_device_properties", "is_bf16_supported", "manual_seed_all", "initial_seed",
        "current_stream", "default_stream", "stream", "Stream", "memory_allocated",
        "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_cached",
        "max_memory_cached", "reset_peak_memory_stats", "reset_max_memory_allocated",
        "reset_max_memory_cached", "memory_stats", "mem_get_info", "is_current_stream_capturing",
        "graph", "graph_pool_handle", "default_generators", "init",
    }
)  # fmt: skip


class SimulatedMpsModule(SimulatedDeviceModule):
    """``torch.mps``: one device, no device arguments, its own memory functions."""

    def __init__(self, *, available: bool, total_memory: int) -> None:
        super().__init__(
            "torch.mps",
            device_type="mps",
            device_count=1 if available else 0,
            total_memory=total_memory,
            device_name="Apple M3 Max",
            graph_class_name=None,
            profiler_name=None,
            host_register=None,
            missing=MPS_MISSING,
        )
        setattr(self, "_lazy_call", None)  # noqa: B010 - torch.mps has no lazy-init queue
        self._mps_generator = torch.Generator()
        self.driver_extra = 8 * 1024**2

    def synchronize(self) -> None:  # type: ignore[override]
        return None

    def get_rng_state(self, device: Any = "mps") -> torch.Tensor:
        return self._mps_generator.get_state()

    def set_rng_state(self, new_state: torch.Tensor, device: Any = "mps") -> None:
        self._mps_generator.set_state(new_state)

    def manual_seed(self, seed: int) -> None:
        self._mps_generator.manual_seed(int(seed))

    def seed(self) -> None:
        self._mps_generator.seed()

    def _get_default_mps_generator(self) -> torch.Generator:
        return self._mps_generator

    def current_allocated_memory(self) -> int:
        return self._allocated[0]

    def driver_allocated_memory(self) -> int:
        return self._reserved[0] + self.driver_extra

    def recommended_max_memory(self) -> int:
        return self._total

    def set_per_process_memory_fraction(self, fraction: float) -> None:
        if not 0 <= fraction <= 2:
            raise ValueError(f"invalid fraction {fraction}; must be in [0, 2]")


@contextlib.contextmanager
def simulate_mps(
    *, available: bool = True, built: bool = True, macos: tuple[int, int] = (14, 4)
) -> Iterator[SimulatedDeviceModule]:
    """A macOS torch build (``built``) on a Mac whose GPU is usable (``available``)."""
    module = SimulatedMpsModule(available=built and available, total_memory=36 * 1024**3)
    mps_backend = torch.backends.mps
    with installed(
        module,
        {},
        (mps_backend, "is_built", lambda: built),
        (mps_backend, "is_available", lambda: built and available),
        (mps_backend, "is_macos_or_newer", lambda major, minor: macos >= (major, minor)),
    ):
        yield module
