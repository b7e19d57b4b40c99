"""Simulated vendor runtimes: stand-ins for device modules that need hardware we lack.

Each simulation mimics a vendor's real Python API (function names, signatures, return
kinds) with CPU tensors and plain bookkeeping underneath, and records every call so a test
can check that a backend reaches the right vendor function. Installing one patches
``sys.modules`` and ``torch`` the way the real package would, and restores both on exit::

    with simulate_cuda(device_count=2, capability=(8, 0)) as cuda:
        acc = CudaAccelerator()
        assert acc.device_count() == 2 and "device_count" in cuda.calls

Functions that would create a device context in the real runtime mark the simulation
``initialized``; detection must leave it ``False`` (fork safety).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.torch_version import TorchVersion

from anyaccel.synchronous import HostEvent, HostStream

__all__ = [
    "SimulatedDeviceModule",
    "SimulatedDeviceProperties",
    "SimulatedGraph",
    "patched_attributes",
    "simulate_broken_import",
    "simulate_cpu_only_torch",
    "simulate_cuda",
    "simulate_hpu",
    "simulate_klxpu",
    "simulate_mlu",
    "simulate_mps",
    "simulate_musa",
    "simulate_npu",
    "simulate_npu_without_cann",
    "simulate_sdaa",
    "simulate_supa",
    "simulate_xpu",
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
        return self.default_generators[self._index(device)].get_state()

    def set_rng_state(self, new_state: torch.Tensor, device: Any = "cuda") -> None:
        self.default_generators[self._index(device)].set_state(new_state)

    def manual_seed(self, seed: int) -> None:
        self.default_generators[self._current].manual_seed(int(seed))

    def manual_seed_all(self, seed: int) -> None:
        for generator in self.default_generators:
            generator.manual_seed(int(seed))

    def seed(self) -> None:
        self.default_generators[self._current].seed()

    def initial_seed(self) -> int:
        return int(self.default_generators[self._current].initial_seed())

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


@contextlib.contextmanager
def patched_attributes(
    *patches: tuple[object, str, object], modules: dict[str, object] | None = None
) -> Iterator[None]:
    """Set ``(owner, attribute, value)`` patches and ``sys.modules`` entries; undo on exit."""
    missing = object()
    saved = [(owner, name, getattr(owner, name, missing)) for owner, name, _ in patches]
    saved_modules = {name: sys.modules.get(name, missing) for name in modules or {}}
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        for name, module in (modules or {}).items():
            sys.modules[name] = module  # type: ignore[assignment]
        yield
    finally:
        for owner, name, value in reversed(saved):
            if value is missing:
                with contextlib.suppress(AttributeError):
                    delattr(owner, name)
            else:
                setattr(owner, name, value)
        for name, module in saved_modules.items():
            if module is missing:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module  # type: ignore[assignment]


@contextlib.contextmanager
def simulate_cuda(
    device_count: int = 1,
    capability: tuple[int, int] = (8, 0),
    *,
    hip: str | None = None,
    cuda_version: str = "12.4",
    bf16: bool | None = None,
    total_memory: int = 16 * 1024**3,
) -> Iterator[SimulatedDeviceModule]:
    """Make ``torch`` look like a CUDA build (ROCm if ``hip`` is a version) with GPUs."""
    module = SimulatedDeviceModule(
        "torch.cuda",
        device_type="cuda",
        device_count=device_count,
        capability=capability,
        total_memory=total_memory,
        device_name="Simulated AMD Instinct" if hip else "Simulated NVIDIA GPU",
        bf16=capability[0] >= 8 if bf16 is None else bf16,
    )
    with patched_attributes(
        (torch, "cuda", module),
        (torch.backends.cuda, "is_built", lambda: True),
        (torch.version, "cuda", None if hip else cuda_version),
        (torch.version, "hip", hip),
        modules={"torch.cuda": module},
    ):
        yield module


@contextlib.contextmanager
def simulate_cpu_only_torch() -> Iterator[None]:
    """Make ``torch`` look like a CPU-only build, whatever build is installed (CUDA, ROCm...).

    Tests about the CPU fallback use it so that they hold on a CUDA or ROCm wheel too.
    """

    def no_accelerator(check_available: bool = False) -> None:
        return None

    patches: list[tuple[object, str, object]] = [
        (torch.backends.cuda, "is_built", lambda: False),
        (torch.version, "cuda", None),
        (torch.version, "hip", None),
        (torch.cuda, "device_count", lambda: 0),
        (torch.cuda, "is_available", lambda: False),
    ]
    accelerator_api = getattr(torch, "accelerator", None)  # torch >= 2.6
    if accelerator_api is not None:
        patches.append((accelerator_api, "current_accelerator", no_accelerator))
    with patched_attributes(*patches):
        yield


# ====================================================================== vendor runtimes
# Each ``simulate_<vendor>`` installs the vendor's package the way its real import would
# (``sys.modules`` entries that ``importlib.util.find_spec`` finds, the device module attached
# to ``torch``) and restores everything on exit. Signatures follow the vendor's own API.

_AUTOLOAD_ENV = "TORCH_DEVICE_BACKEND_AUTOLOAD"


def _package_module(name: str, **attributes: Any) -> types.ModuleType:
    """A module object standing for an installed package (``find_spec`` finds it)."""
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, origin="simulated")
    module.__path__ = []
    for key, value in attributes.items():
        setattr(module, key, value)
    return module


class _FailingLoader(importlib.abc.Loader):
    """Loads a package whose import fails the way a broken vendor install does."""

    def __init__(self, fail: Callable[[], None]) -> None:
        self._fail = fail

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        self._fail()


class _BrokenPackageFinder(importlib.abc.MetaPathFinder):
    """Finds ``package`` (so it counts as installed) with a loader that fails."""

    def __init__(self, package: str, fail: Callable[[], None]) -> None:
        self.package = package
        self.attempts = 0
        self._fail = fail

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.package:
            return None
        return importlib.machinery.ModuleSpec(fullname, _FailingLoader(self._attempt))

    def _attempt(self) -> None:
        self.attempts += 1
        self._fail()


@contextlib.contextmanager
def simulate_broken_import(
    package: str, fail: Callable[[], None]
) -> Iterator[_BrokenPackageFinder]:
    """Make ``package`` installed but failing on import with whatever ``fail`` does."""
    finder = _BrokenPackageFinder(package, fail)
    saved_env = os.environ.get(_AUTOLOAD_ENV)
    saved = sys.modules.pop(package, None)
    sys.meta_path.insert(0, finder)
    try:
        yield finder
    finally:
        sys.meta_path.remove(finder)
        sys.modules.pop(package, None)
        if saved is not None:
            sys.modules[package] = saved
        if saved_env is None:
            os.environ.pop(_AUTOLOAD_ENV, None)
        else:
            os.environ[_AUTOLOAD_ENV] = saved_env


def simulate_npu_without_cann(*, exit_on_import: bool = False) -> Any:
    """torch_npu installed without the Ascend CANN libraries.

    Like torch_npu 2.x, the import first switches ``TORCH_DEVICE_BACKEND_AUTOLOAD`` off, then
    fails on ``libhccl.so``; with ``exit_on_import`` it prints a hint and calls ``sys.exit()``
    as older releases did.
    """

    def fail() -> None:
        os.environ[_AUTOLOAD_ENV] = "0"
        if exit_on_import:
            print("Please check that the cann package is installed. Please run 'source set_env.sh'")
            print("libhccl.so: cannot open shared object file: No such file or directory")
            sys.exit()
        raise ImportError("libhccl.so: cannot open shared object file: No such file or directory")

    return simulate_broken_import("torch_npu", fail)


def _simulate_runtime(
    device_module: SimulatedDeviceModule,
    packages: dict[str, types.ModuleType],
    *extra: tuple[object, str, object],
) -> contextlib.AbstractContextManager[None]:
    """Attach ``device_module`` as ``torch.<type>`` and install ``packages``."""
    attribute = device_module.device_type
    modules: dict[str, object] = {f"torch.{attribute}": device_module, **packages}
    return patched_attributes((torch, attribute, device_module), *extra, modules=modules)


# ---------------------------------------------------------------------- npu (torch_npu)
class SimulatedNpuModule(SimulatedDeviceModule):
    """torch_npu's ``torch.npu``: ``get_device_capability()`` is ``None`` unless configured."""

    def get_device_capability(self, device: Any = None) -> Any:
        self._index(device)
        return None


@contextlib.contextmanager
def simulate_npu(
    device_count: int = 1, *, bf16: bool = True, total_memory: int = 64 * 1024**3
) -> Iterator[SimulatedDeviceModule]:
    """torch_npu imported with ``device_count`` Ascend NPUs visible."""
    module = SimulatedNpuModule(
        "torch_npu.npu",
        device_type="npu",
        device_count=device_count,
        total_memory=total_memory,
        device_name="Simulated Ascend910B",
        bf16=bf16,
        graph_class_name="NPUGraph",
        profiler_name="mstx",
        host_register=("npurt", "npuHostRegister", "npuHostUnregister"),
    )
    package = _package_module("torch_npu", npu=module, __version__="2.13.0")
    with _simulate_runtime(module, {"torch_npu": package, "torch_npu.npu": module}):
        yield module


# ---------------------------------------------------------------------- xpu (three paths)
#: Names the native ``torch.xpu`` lacks compared with ``torch.cuda``.
XPU_NATIVE_MISSING = frozenset(
    {
        "memory_cached", "max_memory_cached", "reset_max_memory_allocated",
        "reset_max_memory_cached", "default_stream",
    }
)  # fmt: skip


class SimulatedXpuModule(SimulatedDeviceModule):
    """``torch.xpu``: native (``_is_compiled``) or as IPEX extends it (``lazy_init``, ``amp``)."""

    def _is_compiled(self) -> bool:
        return True


class SimulatedForeignXpuAccelerator:
    """An accelerator in the shape of intel_extension_for_deepspeed's ``XPU_Accelerator``.

    It does not subclass ``anyaccel.Accelerator`` and keeps that package's quirks (its
    ``initial_seed`` wants an argument); every call goes to ``torch.xpu`` at call time.
    """

    def __init__(self) -> None:
        self._name = "xpu"
        self._communication_backend_name = "ccl"
        self._compile_backend = "inductor"

    @staticmethod
    def _xpu() -> Any:
        return torch.xpu

    def is_synchronized_device(self) -> bool:
        return False

    def use_host_timers(self) -> bool:
        return False

    def resolves_data_dependency(self) -> bool:
        return False

    def handles_memory_backpressure(self) -> bool:
        return False

    def device_name(self, device_index: int | None = None) -> str:
        return "xpu" if device_index is None else f"xpu:{device_index}"

    def device(self, device_index: int | None = None) -> Any:
        return torch.device("xpu" if device_index is None else f"xpu:{device_index}")

    def set_device(self, device_index: int) -> None:
        self._xpu().set_device(device_index)

    def current_device(self) -> int:
        return int(self._xpu().current_device())

    def current_device_name(self) -> str:
        return f"xpu:{self._xpu().current_device()}"

    def device_count(self) -> int:
        return int(self._xpu().device_count())

    def synchronize(self, device_index: int | None = None) -> None:
        self._xpu().synchronize(device_index)

    def random(self) -> Any:
        return torch.random

    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        if device_index is None:
            self._xpu().set_rng_state(new_state)
        else:
            self._xpu().set_rng_state(new_state, device_index)

    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        if device_index is None:
            return self._xpu().get_rng_state()  # type: ignore[no-any-return]
        return self._xpu().get_rng_state(device_index)  # type: ignore[no-any-return]

    def manual_seed(self, seed: int) -> None:
        self._xpu().manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        self._xpu().manual_seed_all(seed)

    def initial_seed(self, seed: int) -> int:
        return int(self._xpu().initial_seed(seed))

    def default_generator(self, device_index: int) -> Any:
        return self._xpu().default_generators[device_index]

    @property
    def Stream(self) -> Any:
        return self._xpu().Stream

    def stream(self, stream: Any) -> Any:
        return self._xpu().stream(stream)

    def current_stream(self, device_index: int | None = None) -> Any:
        return self._xpu().current_stream(device_index)

    def default_stream(self, device_index: int | None = None) -> Any:
        return self._xpu().current_stream(device_index)

    @property
    def Event(self) -> Any:
        return self._xpu().Event

    def empty_cache(self) -> None:
        self._xpu().empty_cache()

    def memory_allocated(self, device_index: int | None = None) -> int:
        return int(self._xpu().memory_allocated(device_index))

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        return int(self._xpu().max_memory_allocated(device_index))

    def reset_max_memory_allocated(self, device_index: int | None = None) -> None:
        self._xpu().reset_max_memory_allocated(device_index)

    def memory_cached(self, device_index: int | None = None) -> int:
        return int(self._xpu().memory_reserved(device_index))

    def max_memory_cached(self, device_index: int | None = None) -> int:
        return int(self._xpu().max_memory_reserved(device_index))

    def reset_max_memory_cached(self, device_index: int | None = None) -> None:
        self._xpu().reset_peak_memory_stats(device_index)

    def memory_stats(self, device_index: int | None = None) -> Any:
        return self._xpu().memory_stats(device_index)

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        self._xpu().reset_peak_memory_stats(device_index)

    def memory_reserved(self, device_index: int | None = None) -> int:
        return int(self._xpu().memory_reserved(device_index))

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        return int(self._xpu().max_memory_reserved(device_index))

    def total_memory(self, device_index: int | None = None) -> int:
        return int(self._xpu().get_device_properties(device_index).total_memory)

    def available_memory(self, device_index: int | None = None) -> int:
        return self.total_memory(device_index) - self.memory_reserved(device_index)

    def is_bf16_supported(self) -> bool:
        return True

    def is_fp16_supported(self) -> bool:
        return True

    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.float, torch.half, torch.bfloat16]

    def is_available(self) -> bool:
        return bool(self._xpu().is_available())

    def range_push(self, msg: str) -> None:
        return None

    def range_pop(self) -> None:
        return None

    def lazy_call(self, callback: Callable[[], Any]) -> Any:
        return self._xpu().lazy_init._lazy_call(callback)

    def communication_backend_name(self) -> str:
        return self._communication_backend_name

    def is_triton_supported(self) -> bool:
        return False

    def create_graph(self) -> None:
        return None

    def capture_to_graph(self, graph: Any, pool: Any = None, stream: Any = None) -> Any:
        return contextlib.nullcontext()

    def replay_graph(self, graph: Any) -> None:
        return None

    def _tensor(self, dtype: torch.dtype) -> Callable[..., torch.Tensor]:
        return functools.partial(torch.tensor, dtype=dtype, device="xpu")

    @property
    def BFloat16Tensor(self) -> Callable[..., torch.Tensor]:
        return self._tensor(torch.bfloat16)

    @property
    def ByteTensor(self) -> Callable[..., torch.Tensor]:
        return self._tensor(torch.uint8)

    @property
    def DoubleTensor(self) -> Callable[..., torch.Tensor]:
        return self._tensor(torch.float64)

    @property
    def FloatTensor(self) -> Callable[..., torch.Tensor]:
        return self._tensor(torch.float32)

    @property
    def HalfTensor(self) -> Callable[..., torch.Tensor]:
        return self._tensor(torch.float16)

    @property
    def IntTensor(self) -> Callable[..., torch.Tensor]:
        return self._tensor(torch.int32)

    @property
    def LongTensor(self) -> Callable[..., torch.Tensor]:
        return self._tensor(torch.int64)

    def pin_memory(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        return bool(tensor.is_pinned())

    def on_accelerator(self, tensor: torch.Tensor) -> bool:
        return str(tensor.device).startswith("xpu:")

    def op_builder_dir(self) -> str:
        return "intel_extension_for_deepspeed.op_builder"

    def create_op_builder(self, class_name: str) -> Any:
        return None

    def get_op_builder(self, class_name: str) -> Any:
        return None

    def build_extension(self) -> Any:
        from torch.utils.cpp_extension import BuildExtension

        return BuildExtension

    def export_envs(self) -> list[str]:
        return []

    def visible_devices_envs(self) -> list[str]:
        return ["ZE_AFFINITY_MASK"]

    def set_visible_devices_envs(self, current_env: dict[str, str], local_ids: list[int]) -> None:
        current_env["ZE_AFFINITY_MASK"] = ",".join(map(str, local_ids))

    def get_compile_backend(self) -> str:
        return self._compile_backend

    def set_compile_backend(self, backend: str) -> None:
        self._compile_backend = backend


#: Members the 2023 releases of intel_extension_for_deepspeed's class lack (DeepSpeed's
#: contract grew after them); removing them simulates such an old release.
IXDS_OLD_RELEASE_MISSING = (
    "use_host_timers", "resolves_data_dependency", "handles_memory_backpressure",
    "available_memory", "supported_dtypes", "is_triton_supported", "create_graph",
    "capture_to_graph", "replay_graph", "export_envs", "visible_devices_envs",
    "set_visible_devices_envs", "get_compile_backend", "set_compile_backend",
)  # fmt: skip


@contextlib.contextmanager
def simulate_xpu(
    device_count: int = 1,
    *,
    path: str = "native",
    old_external_release: bool = False,
    total_memory: int = 48 * 1024**3,
) -> Iterator[SimulatedDeviceModule]:
    """Intel GPUs through ``path``: ``"native"`` torch.xpu, ``"ipex"`` or ``"external"``.

    ``"ipex"`` also installs intel_extension_for_pytorch (which extends ``torch.xpu``);
    ``"external"`` installs intel_extension_for_deepspeed on top of that, with its own
    accelerator class (an old release lacking newer members with ``old_external_release``).
    """
    if path not in ("native", "ipex", "external"):
        raise ValueError(f"path={path!r}; expected 'native', 'ipex' or 'external'")
    extended = path != "native"
    module = SimulatedXpuModule(
        "torch.xpu",
        device_type="xpu",
        device_count=device_count,
        total_memory=total_memory,
        device_name="Simulated Intel Data Center GPU Max 1550",
        graph_class_name="XPUGraph",
        profiler_name="itt" if extended else None,
        host_register=None,
        missing=() if extended else XPU_NATIVE_MISSING,
    )
    packages: dict[str, types.ModuleType] = {}
    if extended:
        ipex_additions = {
            "lazy_init": types.SimpleNamespace(_lazy_call=module._lazy_call),
            "amp": _package_module("torch.xpu.amp"),
        }
        for name, value in ipex_additions.items():
            setattr(module, name, value)
        cpp_extension = _package_module(
            "intel_extension_for_pytorch.xpu.cpp_extension",
            DpcppBuildExtension=type("DpcppBuildExtension", (), {}),
        )
        ipex_xpu = _package_module("intel_extension_for_pytorch.xpu", cpp_extension=cpp_extension)
        packages["intel_extension_for_pytorch"] = _package_module(
            "intel_extension_for_pytorch",
            xpu=ipex_xpu,
            _C=types.SimpleNamespace(_has_xpu=lambda: True),
            __version__="2.8.10+xpu",
        )
        packages["intel_extension_for_pytorch.xpu"] = ipex_xpu
        packages["intel_extension_for_pytorch.xpu.cpp_extension"] = cpp_extension
    if path == "external":
        accelerator_class: type[Any] = SimulatedForeignXpuAccelerator
        if old_external_release:
            accelerator_class = type(
                "XPU_Accelerator",
                (),
                {
                    name: member
                    for name, member in vars(SimulatedForeignXpuAccelerator).items()
                    if name not in IXDS_OLD_RELEASE_MISSING and not name.startswith("__")
                }
                | {"__init__": SimulatedForeignXpuAccelerator.__init__},
            )
        packages["intel_extension_for_deepspeed"] = _package_module(
            "intel_extension_for_deepspeed", XPU_Accelerator=accelerator_class
        )
    # Native torch.xpu as anyaccel drives it comes with a newer torch than some users have: on
    # an older torch the simulated machine reports that release, as a real XPU build would.
    from anyaccel.backends import xpu as xpu_backend

    release: tuple[object, str, object] | None = None
    if path == "native" and xpu_backend._torch_release() < xpu_backend.NATIVE_MIN_TORCH:
        needed = ".".join(map(str, xpu_backend.NATIVE_MIN_TORCH))
        release = (torch, "__version__", TorchVersion(f"{needed}.0"))
    with _simulate_runtime(module, packages, *([release] if release else [])):
        yield module


# ---------------------------------------------------------------------- hpu (habana_frameworks)
class SimulatedHpuModule(SimulatedDeviceModule):
    """``habana_frameworks.torch.hpu``: one device per process, its own signatures.

    ``synchronize()``, ``current_stream()`` and ``default_stream()`` take no device;
    ``get_device_properties`` returns a string; memory figures come from ``memory_stats``
    keys (``Limit``, ``InUse``, ``MaxInUse``); ``HPUGraph``/``graph`` exist in lazy mode only.
    """

    def synchronize(self) -> None:  # type: ignore[override]
        return None

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
    experimental = _package_module(
        "habana_frameworks.torch.utils.experimental", _is_fp16_supported=lambda: fp16
    )
    utils = _package_module("habana_frameworks.torch.utils", experimental=experimental)
    core = _package_module("habana_frameworks.torch.core", mark_step=lambda: None, hpu=module)
    compile_backend = _package_module("habana_frameworks.torch.dynamo.compile_backend")
    dynamo = _package_module("habana_frameworks.torch.dynamo", compile_backend=compile_backend)
    package = _package_module(
        "habana_frameworks.torch", hpu=module, core=core, utils=utils, dynamo=dynamo
    )
    modules: dict[str, object] = {
        "habana_frameworks.torch.dynamo": dynamo,
        "habana_frameworks.torch.dynamo.compile_backend": compile_backend,
        "habana_frameworks": _package_module("habana_frameworks", torch=package),
        "habana_frameworks.torch": package,
        "habana_frameworks.torch.hpu": module,
        "habana_frameworks.torch.core": core,
        "habana_frameworks.torch.utils": utils,
        "habana_frameworks.torch.utils.experimental": experimental,
    }
    with patched_attributes(modules=modules), registered_compile_backend("hpu_backend"):
        yield module


@contextlib.contextmanager
def registered_compile_backend(name: str) -> Iterator[None]:
    """Register ``name`` as a ``torch.compile`` backend (running eagerly) while inside.

    Vendor runtimes register their compile backend with dynamo when imported, as
    habana_frameworks does for ``hpu_backend``.
    """
    import torch._dynamo
    from torch._dynamo.backends import registry

    # torch >= 2.6 keeps the functions in _COMPILER_FNS; older torch (2.4) in _BACKENDS.
    compiler_fns: dict[str, Any] = getattr(registry, "_COMPILER_FNS", registry._BACKENDS)
    if name in compiler_fns:
        yield
        return

    def run_eagerly(graph_module: Any, example_inputs: Any) -> Any:
        return graph_module.forward

    torch._dynamo.register_backend(compiler_fn=run_eagerly, name=name)
    try:
        yield
    finally:
        compiler_fns.pop(name, None)


# ---------------------------------------------------------------------- mps (Apple)
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
    with patched_attributes(
        (torch, "mps", module),
        (mps_backend, "is_built", lambda: built),
        (mps_backend, "is_available", lambda: built and available),
        (mps_backend, "is_macos_or_newer", lambda major, minor: macos >= (major, minor)),
        modules={"torch.mps": module},
    ):
        yield module


# ---------------------------------------------------------------------- PrivateUse1 vendors
def _simulate_privateuse1(
    package: str,
    device_type: str,
    device_count: int,
    *,
    device_name: str,
    graph_class_name: str | None,
    profiler_name: str | None,
    cuda_compat: bool = False,
) -> contextlib.AbstractContextManager[SimulatedDeviceModule]:
    module = SimulatedDeviceModule(
        f"{package}.{device_type}",
        device_type=device_type,
        device_count=device_count,
        device_name=device_name,
        graph_class_name=graph_class_name,
        profiler_name=profiler_name,
        host_register=None,
    )
    packages = {package: _package_module(package, **{device_type: module})}
    extra: list[tuple[object, str, object]] = []
    if cuda_compat:
        extra = [
            (torch, "cuda", module),
            (torch.backends.cuda, "is_built", lambda: True),
            (torch.version, "cuda", "12.1"),
        ]
    return _yielding(module, _simulate_runtime(module, packages, *extra))


@contextlib.contextmanager
def _yielding(
    module: SimulatedDeviceModule, context: contextlib.AbstractContextManager[None]
) -> Iterator[SimulatedDeviceModule]:
    with context:
        yield module


def simulate_mlu(
    device_count: int = 1,
) -> contextlib.AbstractContextManager[SimulatedDeviceModule]:
    """torch_mlu with ``device_count`` Cambricon MLUs (``MLUGraph``, ``cnpx`` ranges)."""
    return _simulate_privateuse1(
        "torch_mlu",
        "mlu",
        device_count,
        device_name="MLU590",
        graph_class_name="MLUGraph",
        profiler_name="cnpx",
    )


def simulate_sdaa(
    device_count: int = 1,
) -> contextlib.AbstractContextManager[SimulatedDeviceModule]:
    """torch_sdaa with ``device_count`` Tecorigin SDAA devices (no graphs)."""
    return _simulate_privateuse1(
        "torch_sdaa",
        "sdaa",
        device_count,
        device_name="T100",
        graph_class_name=None,
        profiler_name=None,
    )


def simulate_supa(
    device_count: int = 1, *, cuda_compat: bool = True
) -> contextlib.AbstractContextManager[SimulatedDeviceModule]:
    """torch_supa with Biren GPUs, also answering as ``torch.cuda`` like the real package."""
    return _simulate_privateuse1(
        "torch_supa",
        "supa",
        device_count,
        device_name="BR106",
        graph_class_name="SUPAGraph",
        profiler_name=None,
        cuda_compat=cuda_compat,
    )


def simulate_musa(
    device_count: int = 1, *, cuda_compat: bool = False
) -> contextlib.AbstractContextManager[SimulatedDeviceModule]:
    """torch_musa with Moore Threads GPUs (with ``cuda_compat``, a CUDA-compat layer too)."""
    return _simulate_privateuse1(
        "torch_musa",
        "musa",
        device_count,
        device_name="MTT S4000",
        graph_class_name=None,
        profiler_name=None,
        cuda_compat=cuda_compat,
    )


# ---------------------------------------------------------------------- klxpu (torch_xmlir)
@contextlib.contextmanager
def simulate_klxpu(
    device_count: int = 1, *, total_memory: int = 96 * 1024**3
) -> Iterator[SimulatedDeviceModule]:
    """torch_xmlir with Kunlunxin XPUs: like the real package, it drives them as ``torch.cuda``."""
    module = SimulatedDeviceModule(
        "torch.cuda",
        device_type="cuda",
        device_count=device_count,
        total_memory=total_memory,
        device_name="Simulated Kunlunxin P800",
        host_register=None,
    )
    package = _package_module("torch_xmlir", __version__="2.0.1")
    with _simulate_runtime(
        module,
        {"torch_xmlir": package},
        (torch.backends.cuda, "is_built", lambda: True),
        (torch.version, "cuda", "11.7"),
        (torch.version, "hip", None),
    ):
        yield module
