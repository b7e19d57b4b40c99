"""habana_frameworks (Intel Gaudi): one device per process, its own signatures, lazy-mode graphs."""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

from anyaccel.testing.simulated.device_module import (
    SimulatedDeviceModule,
    SimulatedGraph,
    SimulatedStream,
)
from anyaccel.testing.simulated.patching import (
    package_module,
    patched_attributes,
    registered_compile_backend,
)

__all__ = ["SimulatedHpuModule", "simulate_hpu"]


class SimulatedHpuModule(SimulatedDeviceModule):
    """``habana_frameworks.torch.hpu``: one device per process, its own signatures.

    ``synchronize()``, ``current_stream()`` and ``default_stream()`` take no device;
    ``get_device_properties`` returns a string; memory figures come from ``memory_stats``
    keys (``Limit``, ``InUse``, ``MaxInUse``); ``HPUGraph``/``graph`` exist in lazy mode only.
    """

    def synchronize(self) -> None:  # type: ignore[override]
        return None

    @property
    def random(self) -> types.SimpleNamespace:
        """``habana_frameworks.torch.hpu.random``: the generator functions, as Gaudi has them."""
        return types.SimpleNamespace(
            default_generators=self.default_generators,
            get_rng_state=self.get_rng_state,
            set_rng_state=self.set_rng_state,
            manual_seed=self.manual_seed,
            manual_seed_all=self.manual_seed_all,
            initial_seed=self.initial_seed,
            seed=self.seed,
        )

    def current_stream(self) -> SimulatedStream:  # type: ignore[override]
        return SimulatedStream(device=self._current)

    def default_stream(self) -> SimulatedStream:  # type: ignore[override]
        return SimulatedStream(device=self._current)

    def get_device_properties(self, device: Any = None) -> str:  # type: ignore[override]
        self._index(device)
        return f"(sramBaseAddress=1, dramBaseAddress=2, dramSize={self._total}, tpcEnabledMask=1)"

    def memory_stats(self, device: Any = None) -> dict[str, int]:  # type: ignore[override]
        i = self._index(device)
        return {
            "Limit": self._total,
            "InUse": self._allocated[i],
            "MaxInUse": self._peak_allocated[i],
            "NumAllocs": 0,
            "NumFrees": 0,
        }

    def memory_reserved(self, device: Any = None) -> int:
        return self._total

    def max_memory_reserved(self, device: Any = None) -> int:
        return self._total

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        i = self._index(device)
        return (self._total - self._allocated[i], self._total)

    @contextlib.contextmanager
    def graph(  # type: ignore[override]
        self, hpu_graph: SimulatedGraph, stream: Any = None
    ) -> Iterator[None]:
        self.synchronize()
        hpu_graph.capture_begin()
        try:
            yield
        finally:
            hpu_graph.capture_end()


@contextlib.contextmanager
def simulate_hpu(
    device_count: int = 1,
    *,
    lazy_mode: bool = False,
    fp16: bool = True,
    total_memory: int = 96 * 1024**3,
) -> Iterator[SimulatedDeviceModule]:
    """habana_frameworks with ``device_count`` Gaudi devices; graphs only with ``lazy_mode``."""
    module = SimulatedHpuModule(
        "habana_frameworks.torch.hpu",
        device_type="hpu",
        device_count=device_count,
        total_memory=total_memory,
        device_name="GAUDI2",
        graph_class_name="HPUGraph" if lazy_mode else None,
        profiler_name=None,
        host_register=None,
        missing=("empty_cache", "reset_max_memory_allocated", "reset_max_memory_cached"),
    )
    experimental = package_module(
        "habana_frameworks.torch.utils.experimental", _is_fp16_supported=lambda: fp16
    )
    utils = package_module("habana_frameworks.torch.utils", experimental=experimental)
    core = package_module("habana_frameworks.torch.core", mark_step=lambda: None, hpu=module)
    compile_backend = package_module("habana_frameworks.torch.dynamo.compile_backend")
    dynamo = package_module("habana_frameworks.torch.dynamo", compile_backend=compile_backend)
    package = package_module(
        "habana_frameworks.torch", hpu=module, core=core, utils=utils, dynamo=dynamo
    )
    modules: dict[str, object] = {
        "habana_frameworks.torch.dynamo": dynamo,
        "habana_frameworks.torch.dynamo.compile_backend": compile_backend,
        "habana_frameworks": package_module("habana_frameworks", torch=package),
        "habana_frameworks.torch": package,
        "habana_frameworks.torch.hpu": module,
        "habana_frameworks.torch.core": core,
        "habana_frameworks.torch.utils": utils,
        "habana_frameworks.torch.utils.experimental": experimental,
    }
    with patched_attributes(modules=modules), registered_compile_backend("hpu_backend"):
        yield module
