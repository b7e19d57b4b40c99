"""The accelerator contract: one abstract base class that every backend satisfies.

Only the core that truly differs per backend is abstract (device placement, device RNG,
memory figures). Everything else has a default that is correct for a device without the
feature (no streams, no graphs, no pinned memory), so adding a method here later never
breaks a subclass written outside anyaccel. Names and signatures follow DeepSpeed's
``deepspeed.accelerator`` so that code ports by changing its import.

Base-class state that each instance makes for itself (a device module, a collectives backend
chosen at run time) is declared with :class:`~anyaccel.instance_defaults.InstanceDefault`,
re-exported here; its machinery lives in :mod:`anyaccel.instance_defaults`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from types import ModuleType
from typing import Any, ClassVar

import torch

from anyaccel.deepspeed_abc import register_with_deepspeed
from anyaccel.errors import UnsupportedFeatureError
from anyaccel.instance_defaults import DeclaresInstanceDefaults, InstanceDefault
from anyaccel.synchronous import (
    HostEvent,
    HostGraph,
    HostStream,
    call_now,
    host_graph_capture,
    host_stream_context,
)
from anyaccel.tensor_types import TensorType

__all__ = ["Accelerator", "DeepSpeedAccelerator", "InstanceDefault", "TensorFactory"]

#: Older name of the tensor-type constructors' type.
TensorFactory = TensorType


def _empty_host(
    accelerator: Accelerator, shape: tuple[int, ...], dtype: torch.dtype
) -> torch.Tensor:
    """An uninitialised host tensor, page-locked where ``accelerator`` can pin."""
    if accelerator._can_pin():
        try:
            return torch.empty(shape, dtype=dtype, pin_memory=True)
        except RuntimeError:  # torch has no pinning hooks for this device here
            pass
    return torch.empty(shape, dtype=dtype)


def _require_host(device: str | torch.device, caller: str) -> None:
    """``ValueError`` unless ``device`` names the CPU (pinned buffers live on the host)."""
    try:
        device_type = torch.device(device).type
    except (RuntimeError, TypeError) as error:
        raise ValueError(
            f"{caller} makes host buffers; device={device!r} is not a device ({error}). "
            "Leave device='cpu'."
        ) from None
    if device_type != "cpu":
        raise ValueError(
            f"{caller} makes host buffers; device={device!r} is not the CPU. "
            "Allocate device tensors with torch.empty(..., device=...) instead."
        )


class Accelerator(abc.ABC, DeclaresInstanceDefaults):
    """What every anyaccel accelerator offers; subclass it to add hardware.

    Subclasses may set ``_name``, ``_communication_backend_name`` and ``_compile_backend`` as
    class attributes or in ``__init__`` (before or after ``super().__init__()``, or without
    calling it, as DeepSpeed's accelerators do): no base class needs its ``__init__`` to run.
    State a base class makes per instance is declared with ``InstanceDefault``
    (:class:`~anyaccel.instance_defaults.DeclaresInstanceDefaults` makes it).
    """

    #: The backend's name, as ``DS_ACCELERATOR`` spells it and torch names the device type.
    _name: str = ""
    #: The ``torch.distributed`` backend for collectives between processes.
    _communication_backend_name: str = "gloo"
    #: The ``torch.compile`` backend used unless ``set_compile_backend`` changes it.
    _compile_backend: str | None = "inductor"
    #: Whether ``range_push`` understands NVTX-style ``domain`` and ``category`` arguments.
    supports_nvtx_domain: ClassVar[bool] = False
    #: Environment variables that restrict which devices a process sees.
    visible_devices_env_names: ClassVar[tuple[str, ...]] = ()
    #: Prefixes of environment variables a launcher forwards to other nodes.
    export_env_prefixes: ClassVar[tuple[str, ...]] = ()

    # ------------------------------------------------------------------ identity & model
    def is_synchronized_device(self) -> bool:
        """Whether work finishes before the call that queued it returns (no async streams)."""
        return False

    def use_host_timers(self) -> bool:
        """Whether wall-clock timers on the host measure device work correctly."""
        return self.is_synchronized_device()

    def resolves_data_dependency(self) -> bool:
        """Whether the device orders dependent work itself, so no explicit sync is needed."""
        return self.is_synchronized_device()

    def handles_memory_backpressure(self) -> bool:
        """Whether the runtime blocks allocation until memory frees, so no manual throttle."""
        return self.is_synchronized_device()

    def prefer_triton_grouped_mm(self) -> bool:
        """Whether a Triton grouped GEMM beats ``torch._grouped_mm`` on this device."""
        return False

    # ------------------------------------------------------------------ device
    def device_name(self, device_index: int | None = None) -> str:
        """The device string: ``'cuda'`` for the type, ``'cuda:1'`` for one device.

        With no index it is the torch device type of this accelerator's tensors, which is
        what ``torch.autocast(device_type=...)``, ``torch.amp.GradScaler(...)``,
        ``torch.device(...)`` and ``map_location=`` want. It is not always ``_name``: Kunlunxin
        XPUs (``klxpu``) keep their tensors on the ``cuda`` device type.
        """
        if device_index is None:
            return self._name
        return f"{self._name}:{device_index}"

    def device(self, device_index: int | None = None) -> torch.device:
        """A ``torch.device`` of this type, for ``device_index`` or the type alone."""
        return torch.device(self.device_name(device_index))

    @abc.abstractmethod
    def set_device(self, device_index: int) -> None:
        """Make ``device_index`` this process's current device."""

    @abc.abstractmethod
    def current_device(self) -> int:
        """The index of the current device (an int, not a device: see ``current_device_name``)."""

    def current_device_name(self) -> str:
        """The current device as a string usable as ``device=``, e.g. ``'cuda:0'``."""
        return f"{self._name}:{self.current_device()}"

    @abc.abstractmethod
    def device_count(self) -> int:
        """How many devices of this type this process can see."""

    @abc.abstractmethod
    def synchronize(self, device_index: int | None = None) -> None:
        """Wait until all queued work on the device has finished."""

    @abc.abstractmethod
    def is_available(self) -> bool:
        """Whether this backend can run work in this process."""

    # ------------------------------------------------------------------ RNG
    def random(self) -> ModuleType:
        """The ``torch.random`` module (for ``fork_rng`` and friends)."""
        return torch.random

    @abc.abstractmethod
    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        """Restore the device generator's state from ``get_rng_state``."""

    @abc.abstractmethod
    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        """The device generator's state as a CPU ``ByteTensor``."""

    @abc.abstractmethod
    def manual_seed(self, seed: int) -> None:
        """Seed the current device's generator."""

    @abc.abstractmethod
    def manual_seed_all(self, seed: int) -> None:
        """Seed every device's generator."""

    @abc.abstractmethod
    def initial_seed(self) -> int:
        """The seed the current device's generator started from."""

    def default_generator(self, device_index: int) -> torch.Generator:
        """The default ``torch.Generator`` of device ``device_index``."""
        raise UnsupportedFeatureError(self._name, "default_generator")

    # ------------------------------------------------------------------ streams & events
    @property
    def Stream(self) -> type[Any]:
        """The stream class; instances can be passed to ``stream``."""
        return HostStream

    def stream(self, stream: Any) -> AbstractContextManager[Any]:
        """A context that makes ``stream`` current for the work inside it."""
        return host_stream_context(stream)

    def current_stream(self, device_index: int | None = None) -> Any:
        """The stream work is queued on now."""
        return HostStream(self.device_name(device_index))

    def default_stream(self, device_index: int | None = None) -> Any:
        """The device's default stream."""
        return HostStream(self.device_name(device_index))

    @property
    def Event(self) -> type[Any]:
        """The event class (``record``, ``synchronize``, ``elapsed_time``)."""
        return HostEvent

    # ------------------------------------------------------------------ memory
    def empty_cache(self) -> None:
        """Return cached, unused device memory to the system."""

    @abc.abstractmethod
    def memory_allocated(self, device_index: int | None = None) -> int:
        """Bytes occupied by live tensors (or the process, where that is all one can see).

        Device runtimes count their tensors' bytes; the CPU counts the whole process's
        resident memory. :meth:`memory_measure` says which, in words fit for a report.
        """

    def memory_measure(self) -> str:
        """What :meth:`memory_allocated` counts here, e.g. ``'tensor memory'``, for labels."""
        return "tensor memory"

    @abc.abstractmethod
    def max_memory_allocated(self, device_index: int | None = None) -> int:
        """Peak of ``memory_allocated`` since start or the last reset."""

    def reset_max_memory_allocated(self, device_index: int | None = None) -> None:
        """Restart the peak that ``max_memory_allocated`` reports."""
        self.reset_peak_memory_stats(device_index)

    def memory_cached(self, device_index: int | None = None) -> int:
        """Old name of ``memory_reserved``."""
        return self.memory_reserved(device_index)

    def max_memory_cached(self, device_index: int | None = None) -> int:
        """Old name of ``max_memory_reserved``."""
        return self.max_memory_reserved(device_index)

    def reset_max_memory_cached(self, device_index: int | None = None) -> None:
        """Restart the peak that ``max_memory_cached`` reports."""
        self.reset_peak_memory_stats(device_index)

    def memory_stats(self, device_index: int | None = None) -> dict[str, Any]:
        """Allocator statistics, with at least the ``torch.cuda.memory_stats`` byte keys."""
        allocated = self.memory_allocated(device_index)
        reserved = self.memory_reserved(device_index)
        return {
            "allocated_bytes.all.current": allocated,
            "allocated_bytes.all.peak": self.max_memory_allocated(device_index),
            "reserved_bytes.all.current": reserved,
            "reserved_bytes.all.peak": self.max_memory_reserved(device_index),
        }

    @abc.abstractmethod
    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        """Restart every peak figure."""

    def memory_reserved(self, device_index: int | None = None) -> int:
        """Bytes held by the allocator, in use or cached."""
        return self.memory_allocated(device_index)

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        """Peak of ``memory_reserved`` since start or the last reset."""
        return self.max_memory_allocated(device_index)

    @abc.abstractmethod
    def total_memory(self, device_index: int | None = None) -> int:
        """The device's memory capacity in bytes."""

    def available_memory(self, device_index: int | None = None) -> int:
        """Bytes still free on the device, counting other processes' use where visible."""
        return max(0, self.total_memory(device_index) - self.memory_reserved(device_index))

    # ------------------------------------------------------------------ data types
    def is_bf16_supported(self) -> bool:
        """Whether bfloat16 compute runs on this device."""
        return False

    def is_fp16_supported(self) -> bool:
        """Whether float16 compute runs on this device."""
        return False

    def is_fp64_supported(self) -> bool:
        """Whether float64 compute runs on this device."""
        return True

    def supported_dtypes(self) -> list[torch.dtype]:
        """Floating dtypes usable for training here, float32 first."""
        dtypes = [torch.float32]
        if self.is_fp16_supported():
            dtypes.append(torch.float16)
        if self.is_bf16_supported():
            dtypes.append(torch.bfloat16)
        return dtypes

    # ------------------------------------------------------------------ tensor types
    def _tensor_factory(self, dtype: torch.dtype, name: str = "Tensor") -> TensorType:
        return TensorType(name, dtype, self.device_name())

    @property
    def BFloat16Tensor(self) -> TensorType:
        """bfloat16 tensors on this device: ``BFloat16Tensor(2, 3)``, ``BFloat16Tensor([1.0])``."""
        return self._tensor_factory(torch.bfloat16, "BFloat16Tensor")

    @property
    def ByteTensor(self) -> TensorType:
        """uint8 tensors on this device, by sizes or from data."""
        return self._tensor_factory(torch.uint8, "ByteTensor")

    @property
    def DoubleTensor(self) -> TensorType:
        """float64 tensors on this device, by sizes or from data."""
        return self._tensor_factory(torch.float64, "DoubleTensor")

    @property
    def FloatTensor(self) -> TensorType:
        """float32 tensors on this device, by sizes or from data; ``isinstance`` works too."""
        return self._tensor_factory(torch.float32, "FloatTensor")

    @property
    def HalfTensor(self) -> TensorType:
        """float16 tensors on this device, by sizes or from data."""
        return self._tensor_factory(torch.float16, "HalfTensor")

    @property
    def IntTensor(self) -> TensorType:
        """int32 tensors on this device, by sizes or from data."""
        return self._tensor_factory(torch.int32, "IntTensor")

    @property
    def LongTensor(self) -> TensorType:
        """int64 tensors on this device, by sizes or from data."""
        return self._tensor_factory(torch.int64, "LongTensor")

    # ------------------------------------------------------------------ pinning & placement
    def pin_memory(
        self,
        tensor: torch.Tensor,
        make_copy: bool = True,
        match_shape: bool = True,
        align_bytes: int = 1,
    ) -> torch.Tensor:
        """Page-locked host memory for ``tensor``, for fast asynchronous copies to the device.

        As DeepSpeed: ``make_copy=True`` gives a pinned copy of ``tensor`` (itself if already
        pinned); ``make_copy=False`` treats ``tensor`` as a template and gives a fresh,
        uninitialised pinned buffer of its shape (flat when ``match_shape=False``). A backend
        that cannot pin (the CPU, unified memory) returns ``tensor`` itself, as do device
        tensors. ``align_bytes`` is accepted for older DeepSpeed code and not needed.
        """
        if tensor.device.type != "cpu" or not self._can_pin():
            return tensor
        if make_copy:
            return tensor if tensor.is_pinned() else tensor.pin_memory()
        shape = tuple(tensor.shape) if match_shape else (tensor.numel(),)
        return _empty_host(self, shape, tensor.dtype)

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` lives in page-locked host memory."""
        try:
            return tensor.device.type == "cpu" and bool(tensor.is_pinned())
        except RuntimeError:  # torch has no pinning hooks here: nothing can be pinned
            return False

    def unpin_memory(self, tensor: torch.Tensor) -> None:
        """Release pinning made by a native pinned-memory pool; returns ``None`` as DeepSpeed.

        Memory pinned through torch is released with its last reference, so there is
        nothing to do here and ``tensor`` is left as it is.
        """
        return None

    def _can_pin(self) -> bool:
        """Whether this backend can page-lock host memory in this process."""
        return self.is_available()

    def pin_memory_applies(self) -> bool:
        """Whether pinning host memory speeds copies to this accelerator in this process.

        The value to hand to ``DataLoader(..., pin_memory=...)``: ``False`` on the CPU (no
        device to copy to) and on unified-memory devices, where :meth:`pin_memory` returns
        the tensor as it is.
        """
        return self._can_pin()

    def pin_empty(
        self,
        *size: int | Sequence[int],
        dtype: torch.dtype,
        device: str | torch.device = "cpu",
    ) -> torch.Tensor:
        """An uninitialised host tensor, page-locked where the backend supports it.

        ``size`` is given like ``torch.empty``'s: ``pin_empty(2, 3, dtype=...)`` or
        ``pin_empty((2, 3), dtype=...)``; no size gives a 0-d tensor. A device other than the
        CPU is a ``ValueError``.
        """
        _require_host(device, "pin_empty")
        if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
            shape = tuple(int(n) for n in size[0])
        else:
            shape = tuple(int(n) for n in size)  # type: ignore[arg-type]
        return _empty_host(self, shape, dtype)

    def pin_empty_like(
        self,
        tensor: torch.Tensor,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        """Like ``pin_empty`` with ``tensor``'s shape and (unless given) dtype."""
        _require_host(device, "pin_empty_like")
        return _empty_host(self, tuple(tensor.shape), tensor.dtype if dtype is None else dtype)

    def pin_memory_alignment(self) -> int:
        """Byte alignment pinned buffers need; 1 means none."""
        return 1

    def register_host_memory(self, address: int, num_bytes: int) -> bool:
        """Page-lock an existing host buffer; returns whether it was locked."""
        return False

    def unregister_host_memory(self, address: int) -> bool:
        """Undo ``register_host_memory``; returns whether anything was unlocked."""
        return False

    def on_accelerator(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` lives on a device of this type."""
        return bool(tensor.device.type == self.device_name().partition(":")[0])

    # ------------------------------------------------------------------ profiling & misc
    def range_push(self, msg: str, domain: str | None = None, category: str | None = None) -> Any:
        """Open a named range in the vendor profiler's timeline."""
        return None

    def range_pop(self, domain: str | None = None) -> Any:
        """Close the innermost range opened by ``range_push``."""
        return None

    def lazy_call(self, callback: Callable[[], Any]) -> Any:
        """Run ``callback`` once the device runtime is initialised (now, if it is)."""
        return call_now(callback)

    def amp(self) -> ModuleType | None:
        """The backend's legacy ``amp`` module, or ``None`` (use ``torch.amp`` instead)."""
        return None

    def is_triton_supported(self) -> bool:
        """Whether Triton kernels can run on this device."""
        return False

    # ------------------------------------------------------------------ graphs
    def is_current_stream_capturing(self) -> bool:
        """Whether work queued now is being captured into a graph."""
        return False

    def create_graph(self) -> Any:
        """A new, empty graph object (a no-op graph where graphs are not supported)."""
        return HostGraph()

    def capture_to_graph(
        self, graph: Any, pool: Any = None, stream: Any = None
    ) -> AbstractContextManager[Any]:
        """A context that records the work inside it into ``graph``."""
        return host_graph_capture(graph, pool, stream)

    def replay_graph(self, graph: Any) -> None:
        """Run the work recorded in ``graph`` again."""
        graph.replay()

    # ------------------------------------------------------------------ communication
    def communication_backend_name(self) -> str:
        """The ``torch.distributed`` backend name to pass to ``init_process_group``."""
        return self._communication_backend_name

    # ------------------------------------------------------------------ launch environment
    def export_envs(self) -> list[str]:
        """Prefixes of environment variables a multi-node launcher should forward."""
        return list(self.export_env_prefixes)

    def visible_devices_envs(self) -> list[str]:
        """Names of the environment variables that select visible devices."""
        return list(self.visible_devices_env_names)

    def set_visible_devices_envs(
        self, current_env: dict[str, str], local_accelerator_ids: Sequence[int | str]
    ) -> None:
        """Write ``local_accelerator_ids`` into each visible-devices variable of ``current_env``."""
        value = ",".join(str(i) for i in local_accelerator_ids)
        for name in self.visible_devices_envs():
            current_env[name] = value

    # ------------------------------------------------------------------ compile
    def get_compile_backend(self) -> str | None:
        """The ``torch.compile`` backend name for this device."""
        return self._compile_backend

    def set_compile_backend(self, backend: str) -> None:
        """Choose the ``torch.compile`` backend; must be one torch knows."""
        import torch._dynamo

        known = torch._dynamo.list_backends(exclude_tags=())
        if backend not in known:
            raise ValueError(
                f"{backend!r} is not a torch.compile backend known here "
                f"(accelerator {self._name!r}). Known backends: {', '.join(sorted(known))}."
            )
        self._compile_backend = backend

    # ------------------------------------------------------------------ op building
    def op_builder_dir(self) -> str:
        """The import path of the package holding this accelerator's op builders."""
        from anyaccel.ops import registry

        return registry.builder_package(self._name)

    def get_op_builder(self, class_name: str) -> type[Any] | None:
        """The op-builder class called ``class_name``, or ``None`` if no backend has it."""
        from anyaccel.ops import registry

        return registry.find_builder_class(self.op_builder_dir(), class_name, self._name)

    def create_op_builder(self, class_name: str) -> Any | None:
        """An instance of the op builder called ``class_name``, or ``None``."""
        builder_class = self.get_op_builder(class_name)
        return None if builder_class is None else builder_class()

    def build_extension(self) -> type[Any]:
        """The setuptools command class that builds this accelerator's extensions."""
        from torch.utils.cpp_extension import BuildExtension

        return BuildExtension

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._name!r}>"


#: DeepSpeed's name for the same base class, for code that imports it by that name.
DeepSpeedAccelerator = Accelerator

# DeepSpeed's set_accelerator() accepts only instances of its own ABC: become a virtual
# subclass of it, now if DeepSpeed is loaded, else when it is (DeepSpeed is never imported).
register_with_deepspeed(Accelerator)
