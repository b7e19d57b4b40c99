"""The simulated device module: a ``torch.cuda``-shaped stand-in that records every call.

Vendor simulations configure it (module name, device type, graph class, profiler, host
registration, the names their runtime lacks) or subclass it where a vendor's signatures
differ. Calls that would create a device context in the real runtime mark it ``initialized``.
"""

from __future__ import annotations

import contextlib
import types
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from anyaccel.synchronous import HostEvent, HostStream

__all__ = [
    "SimulatedDeviceModule",
    "SimulatedDeviceProperties",
    "SimulatedEvent",
    "SimulatedGraph",
    "SimulatedStream",
]

_BLOCK = 2 * 1024 * 1024  # the caching allocator's segment size


@dataclass
class SimulatedDeviceProperties:
    """What ``get_device_properties`` returns: the fields code reads most."""

    name: str
    total_memory: int
    major: int
    minor: int
    multi_processor_count: int = 108


class SimulatedStream(HostStream):
    """A vendor stream object (``torch.cuda.Stream(device=None, priority=0)``)."""


class SimulatedEvent(HostEvent):
    """A vendor event object (``torch.cuda.Event(enable_timing=False, ...)``)."""


class SimulatedGraph:
    """A vendor graph (``torch.cuda.CUDAGraph``): captures by name, counts replays."""

    def __init__(self, owner: SimulatedDeviceModule | None = None) -> None:
        self._owner = owner
        self.captured = False
        self.replays = 0

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        """Start capturing work queued on the current stream."""
        if self._owner is not None:
            self._owner._capturing = True

    def capture_end(self) -> None:
        """Stop capturing."""
        if self._owner is not None:
            self._owner._capturing = False
        self.captured = True

    def replay(self) -> None:
        """Run the captured work again."""
        if not self.captured:
            raise RuntimeError("replay() called on a graph that captured nothing")
        self.replays += 1

    def reset(self) -> None:
        """Drop the capture."""
        self.captured = False

    def pool(self) -> tuple[int, int]:
        """The graph's memory-pool handle."""
        return (0, id(self))


class _Profiler(types.ModuleType):
    """A ``torch.cuda.nvtx``-style range profiler that keeps its range stack."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.stack: list[str] = []

    def range_push(self, msg: str) -> int:
        self.stack.append(msg)
        return len(self.stack) - 1

    def range_pop(self) -> int:
        if self.stack:
            self.stack.pop()
        return len(self.stack)


class _HostRuntime:
    """``torch.cuda.cudart()``-style runtime handle for host-memory registration."""

    def __init__(self, owner: SimulatedDeviceModule, register: str, unregister: str) -> None:
        self.registered: dict[int, int] = {}
        setattr(self, register, self._register)
        setattr(self, unregister, self._unregister)
        self._owner = owner

    def _register(self, address: int, num_bytes: int, flags: int = 0) -> int:
        self.registered[address] = num_bytes
        return 0

    def _unregister(self, address: int) -> int:
        return 0 if self.registered.pop(address, None) is not None else 1


class SimulatedDeviceContext:
    """The ``torch.cuda.device`` context: ``idx`` is the device (-1 for ``None``, a no-op)."""

    def __init__(self, module: SimulatedDeviceModule, device: Any) -> None:
        self._module = module
        self.idx = -1 if device is None else module._index(device)
        self.prev_idx = -1

    def __enter__(self) -> SimulatedDeviceContext:
        if self.idx >= 0:
            self.prev_idx = self._module.current_device()
            self._module.set_device(self.idx)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.idx >= 0:
            self._module.set_device(self.prev_idx)


class SimulatedDeviceModule(types.ModuleType):
    """A ``torch.cuda``-shaped device module for ``device_count`` simulated devices."""

    _INITIALISING = frozenset(
        {
            "set_device", "synchronize", "get_rng_state", "set_rng_state", "manual_seed",
            "manual_seed_all", "initial_seed", "current_stream", "default_stream", "stream",
            "empty_cache", "memory_allocated", "max_memory_allocated", "memory_reserved",
            "max_memory_reserved", "memory_stats", "reset_peak_memory_stats",
            "get_device_properties", "get_device_capability", "mem_get_info", "init",
            "_lazy_init", "Stream", "Event", "graph", "current_device",
        }
    )  # fmt: skip

    def __init__(
        self,
        module_name: str = "torch.cuda",
        *,
        device_type: str = "cuda",
        device_count: int = 1,
        capability: tuple[int, int] = (8, 0),
        total_memory: int = 16 * 1024**3,
        device_name: str = "Simulated GPU",
        bf16: bool = True,
        graph_class_name: str | None = "CUDAGraph",
        profiler_name: str | None = "nvtx",
        host_register: tuple[str, str, str] | None = (
            "cudart",
            "cudaHostRegister",
            "cudaHostUnregister",
        ),
        missing: Iterable[str] = (),
    ) -> None:
        super().__init__(module_name)
        self._missing = frozenset(missing) | ({"graph"} if graph_class_name is None else set())
        self.device_type = device_type
        self.calls: list[str] = []
        self.initialized = False
        self._count = device_count
        self._capability = capability
        self._total = total_memory
        self._device_name = device_name
        self._bf16 = bf16
        self._current = 0
        self._capturing = False
        self._allocated = [0] * device_count
        self._peak_allocated = [0] * device_count
        self._reserved = [0] * device_count
        self._peak_reserved = [0] * device_count
        self._lazy_queue: list[Callable[[], Any]] = []
        self.default_generators = tuple(torch.Generator() for _ in range(device_count))
        self.Stream = SimulatedStream
        self.Event = SimulatedEvent
        if graph_class_name is not None:
            setattr(self, graph_class_name, lambda: SimulatedGraph(self))
        if profiler_name is not None:
            setattr(self, profiler_name, _Profiler(f"{module_name}.{profiler_name}"))
        if host_register is not None:
            factory, register, unregister = host_register
            runtime = _HostRuntime(self, register, unregister)
            setattr(self, factory, lambda: runtime)

    # ------------------------------------------------------------ bookkeeping
    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("_") and name in super().__getattribute__("_missing"):
            module_name = super().__getattribute__("__name__")
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = super().__getattribute__(name)
        if not name.startswith("__") and callable(value) and name not in _UNTRACKED:
            calls = super().__getattribute__("calls")
            calls.append(name)
            if name in type(self)._INITIALISING:
                object.__setattr__(self, "initialized", True)
        return value

    def _generator(self, device: Any) -> torch.Generator:
        """The device's generator; with no device, the RuntimeError the real runtime raises."""
        if not self._count:
            raise RuntimeError(
                f"No {self.device_type.upper()} devices are available (the simulated runtime "
                "has device_count=0)"
            )
        return self.default_generators[self._index(device)]

    def _index(self, device: Any = None) -> int:
        if device is None:
            return self._current
        if isinstance(device, torch.device):
            index = self._current if device.index is None else device.index
        elif isinstance(device, str):
            _, _, suffix = device.partition(":")
            index = int(suffix) if suffix else self._current
        else:
            index = int(device)
        if not 0 <= index < self._count:
            raise RuntimeError(f"invalid device ordinal {index} (have {self._count} devices)")
        return index

    def allocate(self, num_bytes: int, device: Any = None) -> None:
        """Simulate tensors of ``num_bytes`` being created on ``device``."""
        i = self._index(device)
        self._allocated[i] += num_bytes
        self._peak_allocated[i] = max(self._peak_allocated[i], self._allocated[i])
        needed = -(-self._allocated[i] // _BLOCK) * _BLOCK
        self._reserved[i] = max(self._reserved[i], needed)
        self._peak_reserved[i] = max(self._peak_reserved[i], self._reserved[i])

    def free(self, num_bytes: int, device: Any = None) -> None:
        """Simulate ``num_bytes`` of tensors being freed (the allocator keeps the blocks)."""
        i = self._index(device)
        self._allocated[i] = max(0, self._allocated[i] - num_bytes)

    # ------------------------------------------------------------ device
    def is_available(self) -> bool:
        return self._count > 0

    def device_count(self) -> int:
        return self._count

    def current_device(self) -> int:
        return self._current

    def set_device(self, device: Any) -> None:
        self._current = self._index(device)

    def device(self, device: Any) -> SimulatedDeviceContext:
        """``torch.cuda.device(idx)``: a context that makes ``idx`` current, then restores it."""
        return SimulatedDeviceContext(self, device)

    def synchronize(self, device: Any = None) -> None:
        self._index(device)

    def is_initialized(self) -> bool:
        return bool(self.initialized)

    def init(self) -> None:
        for callback in self._lazy_queue:
            callback()
        self._lazy_queue.clear()

    def _lazy_init(self) -> None:
        self.init()

    def _lazy_call(self, callable: Callable[[], Any], **kwargs: Any) -> None:
        if self.initialized:
            callable()
        else:
            self._lazy_queue.append(callable)

    def get_device_name(self, device: Any = None) -> str:
        return self._device_name

    def get_device_capability(self, device: Any = None) -> tuple[int, int]:
        self._index(device)
        return self._capability

    def get_device_properties(self, device: Any = None) -> SimulatedDeviceProperties:
        self._index(device)
        major, minor = self._capability
        return SimulatedDeviceProperties(self._device_name, self._total, major, minor)

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        return self._bf16

    # ------------------------------------------------------------ RNG
    def get_rng_state(self, device: Any = "cuda") -> torch.Tensor:
        return self._generator(device).get_state()

    def set_rng_state(self, new_state: torch.Tensor, device: Any = "cuda") -> None:
        self._generator(device).set_state(new_state)

    def manual_seed(self, seed: int) -> None:
        if self._count:  # the real call is lazy: with no device it seeds nothing, silently
            self._generator(None).manual_seed(int(seed))

    def manual_seed_all(self, seed: int) -> None:
        for generator in self.default_generators:
            generator.manual_seed(int(seed))

    def seed(self) -> None:
        if self._count:
            self._generator(None).seed()

    def initial_seed(self) -> int:
        return int(self._generator(None).initial_seed())

    # ------------------------------------------------------------ streams
    def current_stream(self, device: Any = None) -> SimulatedStream:
        return SimulatedStream(device=self._index(device))

    def default_stream(self, device: Any = None) -> SimulatedStream:
        return SimulatedStream(device=self._index(device))

    @contextlib.contextmanager
    def stream(self, stream: Any) -> Iterator[Any]:
        yield stream

    # ------------------------------------------------------------ memory
    def empty_cache(self) -> None:
        for i in range(self._count):
            self._reserved[i] = -(-self._allocated[i] // _BLOCK) * _BLOCK

    def memory_allocated(self, device: Any = None) -> int:
        return self._allocated[self._index(device)]

    def max_memory_allocated(self, device: Any = None) -> int:
        return self._peak_allocated[self._index(device)]

    def memory_reserved(self, device: Any = None) -> int:
        return self._reserved[self._index(device)]

    def max_memory_reserved(self, device: Any = None) -> int:
        return self._peak_reserved[self._index(device)]

    def memory_cached(self, device: Any = None) -> int:
        return self.memory_reserved(device)

    def max_memory_cached(self, device: Any = None) -> int:
        return self.max_memory_reserved(device)

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        i = self._index(device)
        self._peak_allocated[i] = self._allocated[i]
        self._peak_reserved[i] = self._reserved[i]

    def reset_max_memory_allocated(self, device: Any = None) -> None:
        i = self._index(device)
        self._peak_allocated[i] = self._allocated[i]

    def reset_max_memory_cached(self, device: Any = None) -> None:
        i = self._index(device)
        self._peak_reserved[i] = self._reserved[i]

    def memory_stats(self, device: Any = None) -> OrderedDict[str, int]:
        i = self._index(device)
        return OrderedDict(
            [
                ("allocated_bytes.all.current", self._allocated[i]),
                ("allocated_bytes.all.peak", self._peak_allocated[i]),
                ("reserved_bytes.all.current", self._reserved[i]),
                ("reserved_bytes.all.peak", self._peak_reserved[i]),
            ]
        )

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        i = self._index(device)
        return (self._total - self._reserved[i], self._total)

    # ------------------------------------------------------------ graphs
    def is_current_stream_capturing(self) -> bool:
        return bool(self._capturing)

    @contextlib.contextmanager
    def graph(
        self,
        cuda_graph: SimulatedGraph,
        pool: Any = None,
        stream: Any = None,
        capture_error_mode: str = "global",
    ) -> Iterator[SimulatedGraph]:
        cuda_graph.capture_begin(pool, capture_error_mode)
        try:
            yield cuda_graph
        finally:
            cuda_graph.capture_end()

    def graph_pool_handle(self) -> tuple[int, int]:
        return (0, 0)


_UNTRACKED = frozenset({"allocate", "free", "_index", "is_initialized"})
