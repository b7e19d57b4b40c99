"""One implementation of the contract over a ``torch.cuda``-shaped device module.

``torch.cuda``, ``torch.xpu``, torch_npu's ``torch.npu``, torch_mlu's ``torch.mlu`` and
most vendor runtimes mirror the same function names. A backend built on this class
declares its module and only overrides where its hardware really differs; a function a
vendor module lacks degrades to the contract's default instead of an ``AttributeError``.
"""

from __future__ import annotations

import importlib
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import ModuleType
from typing import Any, ClassVar

import torch

from anyaccel.abstract import Accelerator, InstanceDefault
from anyaccel.errors import AcceleratorError, UnsupportedFeatureError
from anyaccel.probe import package_absent

__all__ = ["TorchModuleAccelerator"]


def _import_device_module(
    module_name: str, runtime_package: str | None, accelerator: str, owner: type[Any]
) -> Any:
    """``torch.<module_name>`` after importing ``runtime_package``; errors name both."""
    if not module_name:
        raise AcceleratorError(
            f"{owner.__qualname__} names no device module: set _name (e.g. self._name = 'zpu' "
            "in __init__) or the class attribute device_module_name before the accelerator is "
            "used"
        )
    if runtime_package:
        importlib.import_module(runtime_package)
    module = getattr(torch, module_name, None)
    if module is None:
        where = (
            f"importing {runtime_package} did not attach it"
            if runtime_package
            else "this torch has no such module"
        )
        raise UnsupportedFeatureError(
            accelerator or module_name,
            f"the device module torch.{module_name}",
            f"{where}; install the package that provides torch.{module_name}, or set "
            "device_module_name (and runtime_package) to the module the runtime attaches.",
        )
    return module


class _UnloadedDeviceModule:
    """Stands in for a device module that could not be loaded when the accelerator was made.

    DeepSpeed-style subclasses may name themselves after ``super().__init__()``, or skip it:
    the first attribute read loads the module from the names the accelerator has by then
    (and puts it in place of this), or raises the error that says what is missing.
    """

    __slots__ = ("_accelerator",)

    def __init__(self, accelerator: TorchModuleAccelerator) -> None:
        self._accelerator = weakref.ref(accelerator)

    def __getattr__(self, name: str) -> Any:
        accelerator = self._accelerator()
        if accelerator is None:
            raise AttributeError(name)
        module = accelerator._load_device_module()
        accelerator._module = module
        return getattr(module, name)


class TorchModuleAccelerator(Accelerator):
    """An accelerator whose device API is a module shaped like ``torch.cuda``."""

    #: Attribute of ``torch`` holding the device module, e.g. ``"cuda"`` for ``torch.cuda``.
    device_module_name: ClassVar[str] = ""
    #: Package to import first so that it attaches the device module (e.g. ``"torch_npu"``).
    runtime_package: ClassVar[str | None] = None
    #: Host-memory registration: (runtime handle function in the device module, register
    #: function, unregister function, register flags), e.g. ``torch.cuda.cudart()``'s
    #: ``cudaHostRegister``; ``None`` where the vendor offers none.
    host_registration: ClassVar[tuple[str, str, str, int] | None] = None
    #: Name of the graph class in the device module (``"CUDAGraph"``), or ``None``.
    graph_class_name: ClassVar[str | None] = None
    #: Attribute of the device module with ``range_push``/``range_pop`` (``"nvtx"``), or ``None``.
    profiler_module_name: ClassVar[str | None] = "nvtx"

    def __init__(self, device_module: ModuleType | Any | None = None) -> None:
        if device_module is not None:
            self._module = device_module
        elif self.device_module_name or self._name:
            self._module = self._load_device_module()  # the name is known: missing is an error now
        # else: a subclass sets self._name after super().__init__(); loaded on first use

    def _load_device_module(self) -> Any:
        """The device module named by this instance (``device_module_name``, else ``_name``).

        Read from the instance, so names a subclass sets in ``__init__`` (DeepSpeed's way) count.
        """
        return _import_device_module(
            self.device_module_name or self._name, self.runtime_package, self._name, type(self)
        )

    def _device_module_or_stand_in(self) -> Any:
        """The device module, or a stand-in that loads it on first use if it cannot load yet."""
        try:
            return self._load_device_module()
        except Exception:  # names set later, or a runtime missing: the first use says which
            return _UnloadedDeviceModule(self)

    #: The device module (``__init__`` loads or is given it; made after construction without
    #: it); each process loads its own (an unpickled accelerator finds the module by name).
    _module: InstanceDefault[Any] = InstanceDefault(_device_module_or_stand_in, per_process=True)

    def _settle(self) -> None:
        """Make the base state; a device module that is still missing is an error now."""
        super()._settle()
        if isinstance(self._module, _UnloadedDeviceModule):
            self._module = self._load_device_module()

    @classmethod
    def runtime_absent(cls) -> str | None:
        """Why this backend's runtime is plainly not here, found without running vendor code.

        ``None``: it may be here, and the guarded probe decides. Detection asks this first, in
        its own thread, so a machine without the runtime pays no guarded probe for it.
        """
        return package_absent(cls.runtime_package) if cls.runtime_package else None

    @classmethod
    def load_device_module(cls) -> Any:
        """Import the runtime package (if any) and return the device module it provides."""
        return _import_device_module(
            cls.device_module_name or cls._name, cls.runtime_package, cls._name, cls
        )

    @property
    def device_module(self) -> Any:
        """The vendor's ``torch.cuda``-shaped module this accelerator drives."""
        if isinstance(self._module, _UnloadedDeviceModule):
            self._module = self._load_device_module()
        return self._module

    def _optional(self, name: str) -> Callable[..., Any] | None:
        """The device module's function ``name``, or ``None`` where the vendor lacks it."""
        function: Callable[..., Any] | None = getattr(self._module, name, None)
        return function

    def _index(self, device_index: int | None) -> int:
        return self._module.current_device() if device_index is None else int(device_index)

    # ------------------------------------------------------------------ device
    def set_device(self, device_index: int) -> None:
        """Make ``device_index`` this process's current device."""
        self._module.set_device(device_index)

    def current_device(self) -> int:
        """The index of the current device."""
        return int(self._module.current_device())

    def current_device_name(self) -> str:
        """The current device as a string, e.g. ``'cuda:0'``."""
        return f"{self._name}:{self._module.current_device()}"

    def device_count(self) -> int:
        """How many devices this process can see."""
        return int(self._module.device_count())

    def synchronize(self, device_index: int | None = None) -> None:
        """Wait until all queued work on the device has finished."""
        self._module.synchronize(device_index)

    def is_available(self) -> bool:
        """Whether the runtime sees a usable device."""
        return bool(self._module.is_available())

    # ------------------------------------------------------------------ RNG
    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        """Restore the device generator's state."""
        if device_index is None:
            self._module.set_rng_state(new_state)
        else:
            self._module.set_rng_state(new_state, device_index)

    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        """The device generator's state as a CPU ``ByteTensor``."""
        if device_index is None:
            state: torch.Tensor = self._module.get_rng_state()
        else:
            state = self._module.get_rng_state(device_index)
        return state

    def manual_seed(self, seed: int) -> None:
        """Seed the current device's generator."""
        self._module.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        """Seed every device's generator."""
        self._module.manual_seed_all(seed)

    def initial_seed(self) -> int:
        """The seed the current device's generator started from."""
        return int(self._module.initial_seed())

    def default_generator(self, device_index: int) -> torch.Generator:
        """The default generator of device ``device_index``."""
        generators = getattr(self._module, "default_generators", None)
        if generators is None:
            return super().default_generator(device_index)
        generator: torch.Generator = generators[device_index]
        return generator

    # ------------------------------------------------------------------ streams & events
    @property
    def Stream(self) -> type[Any]:
        """The vendor's stream class."""
        stream_class: type[Any] | None = getattr(self._module, "Stream", None)
        return stream_class if stream_class is not None else super().Stream

    def stream(self, stream: Any) -> AbstractContextManager[Any]:
        """A context that makes ``stream`` current."""
        function = self._optional("stream")
        return function(stream) if function is not None else super().stream(stream)

    def current_stream(self, device_index: int | None = None) -> Any:
        """The stream work is queued on now."""
        function = self._optional("current_stream")
        return function(device_index) if function else super().current_stream(device_index)

    def default_stream(self, device_index: int | None = None) -> Any:
        """The device's default stream."""
        function = self._optional("default_stream")
        return function(device_index) if function else super().default_stream(device_index)

    @property
    def Event(self) -> type[Any]:
        """The vendor's event class."""
        event_class: type[Any] | None = getattr(self._module, "Event", None)
        return event_class if event_class is not None else super().Event

    # ------------------------------------------------------------------ memory
    def empty_cache(self) -> None:
        """Return cached, unused device memory to the system."""
        function = self._optional("empty_cache")
        if function is not None:
            function()

    def _memory_figure(self, name: str, device_index: int | None, fallback: str) -> int:
        function = self._optional(name)
        if function is None:
            function = self._optional(fallback)
        if function is None:
            raise UnsupportedFeatureError(self._name, name)
        return int(function(device_index))

    def memory_allocated(self, device_index: int | None = None) -> int:
        """Bytes occupied by live tensors on the device."""
        return self._memory_figure("memory_allocated", device_index, "memory_allocated")

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        """Peak of ``memory_allocated`` since start or the last reset."""
        return self._memory_figure("max_memory_allocated", device_index, "memory_allocated")

    def _reset_peak(self, name: str, device_index: int | None) -> None:
        """Call the vendor's reset ``name``, or reset every peak where it has none."""
        function = self._optional(name)
        if function is not None:
            function(device_index)
        else:
            self.reset_peak_memory_stats(device_index)

    def reset_max_memory_allocated(self, device_index: int | None = None) -> None:
        """Restart the peak that ``max_memory_allocated`` reports."""
        self._reset_peak("reset_max_memory_allocated", device_index)

    def reset_max_memory_cached(self, device_index: int | None = None) -> None:
        """Restart the peak that ``max_memory_cached`` reports."""
        self._reset_peak("reset_max_memory_cached", device_index)

    def memory_stats(self, device_index: int | None = None) -> dict[str, Any]:
        """The vendor allocator's statistics."""
        function = self._optional("memory_stats")
        if function is None:
            return super().memory_stats(device_index)
        return dict(function(device_index))

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        """Restart every peak figure."""
        function = self._optional("reset_peak_memory_stats")
        if function is not None:
            function(device_index)

    def memory_reserved(self, device_index: int | None = None) -> int:
        """Bytes held by the caching allocator, in use or cached."""
        return self._memory_figure("memory_reserved", device_index, "memory_cached")

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        """Peak of ``memory_reserved`` since start or the last reset."""
        return self._memory_figure("max_memory_reserved", device_index, "max_memory_cached")

    def total_memory(self, device_index: int | None = None) -> int:
        """The device's memory capacity in bytes."""
        properties = self._module.get_device_properties(self._index(device_index))
        return int(properties.total_memory)

    def available_memory(self, device_index: int | None = None) -> int:
        """Free device memory as the driver reports it (all processes counted)."""
        function = self._optional("mem_get_info")
        if function is None:
            return super().available_memory(device_index)
        free, _total = function(self._index(device_index))
        return int(free)

    # ------------------------------------------------------------------ data types
    def is_bf16_supported(self) -> bool:
        """Whether the device computes in bfloat16."""
        function = self._optional("is_bf16_supported")
        return bool(function()) if function is not None else False

    def is_fp16_supported(self) -> bool:
        """Whether the device computes in float16."""
        return True

    # ------------------------------------------------------------------ host memory
    def _host_runtime(self) -> Any | None:
        if self.host_registration is None or not self.is_available():
            return None
        return getattr(self._module, self.host_registration[0])()

    def register_host_memory(self, address: int, num_bytes: int) -> bool:
        """Page-lock an existing host buffer through the vendor runtime; whether it worked."""
        runtime = self._host_runtime()
        if runtime is None or self.host_registration is None:
            return False
        _, register, _, flags = self.host_registration
        return int(getattr(runtime, register)(address, num_bytes, flags)) == 0

    def unregister_host_memory(self, address: int) -> bool:
        """Undo ``register_host_memory``; whether anything was unlocked."""
        runtime = self._host_runtime()
        if runtime is None or self.host_registration is None:
            return False
        return int(getattr(runtime, self.host_registration[2])(address)) == 0

    # ------------------------------------------------------------------ profiling & misc
    def range_push(self, msg: str, domain: str | None = None, category: str | None = None) -> Any:
        """Open a named range in the vendor profiler (``profiler_module_name``, e.g. ``nvtx``)."""
        profiler = getattr(self._module, self.profiler_module_name or "", None)
        push = getattr(profiler, "range_push", None)
        return push(msg) if push is not None else None

    def range_pop(self, domain: str | None = None) -> Any:
        """Close the innermost range."""
        profiler = getattr(self._module, self.profiler_module_name or "", None)
        pop = getattr(profiler, "range_pop", None)
        return pop() if pop is not None else None

    def lazy_call(self, callback: Callable[[], Any]) -> Any:
        """Queue ``callback`` until the runtime initialises (run now if it has)."""
        function = self._optional("_lazy_call")
        return function(callback) if function is not None else callback()

    def amp(self) -> ModuleType | None:
        """The vendor's legacy ``amp`` module, if it has one."""
        module: ModuleType | None = getattr(self._module, "amp", None)
        return module

    # ------------------------------------------------------------------ graphs
    def is_current_stream_capturing(self) -> bool:
        """Whether work queued now is being captured into a graph."""
        function = self._optional("is_current_stream_capturing")
        return bool(function()) if function is not None else False

    def create_graph(self) -> Any:
        """A new graph of the vendor's graph class (a no-op graph if it has none)."""
        graph_class = getattr(self._module, self.graph_class_name or "", None)
        return graph_class() if graph_class is not None else super().create_graph()

    def capture_to_graph(
        self, graph: Any, pool: Any = None, stream: Any = None
    ) -> AbstractContextManager[Any]:
        """A context that captures the work inside it into ``graph``."""
        capture = self._optional("graph") if self.graph_class_name else None
        if capture is None:
            return super().capture_to_graph(graph, pool, stream)
        context: AbstractContextManager[Any] = capture(graph, pool=pool, stream=stream)
        return context

    # ------------------------------------------------------------------ misc
    def is_triton_supported(self) -> bool:
        """Whether Triton is installed and targets this backend."""
        return False
