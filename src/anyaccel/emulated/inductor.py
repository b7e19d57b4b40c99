"""torch.compile's inductor on the emulated device: torch's CPU C++ code generator behind it.

The device's memory is host memory and its kernels are the CPU's, so inductor's C++ kernels
(``CppScheduling``) run on its tensors as they are; the Python wrapper allocates on the device
and calls them under the device's guard. Registered through inductor's per-device tables
(``register_backend_for_device``, ``register_device_op_overrides``) and Dynamo's
``register_interface_for_device``, as PyTorch's OpenReg does. Where this torch lacks one of
them, inductor refuses the device with a message that names ``aot_eager`` instead.
"""

from __future__ import annotations

import logging
from typing import Any, NoReturn

import torch

__all__ = ["inductor_unsupported_reason", "register_inductor"]

logger = logging.getLogger("anyaccel.ops")


#: Why inductor is refused under strict memory (its kernels would die of SIGSEGV there).
STRICT_MEMORY_REASON = (
    "strict memory is on: inductor's C++ kernels read device memory through host pointers, "
    "which strict memory makes fault outside the device's own kernels; install without "
    "strict_memory to compile with inductor"
)


def inductor_unsupported_reason(strict_memory: bool | None = None) -> str | None:
    """Why inductor cannot compile for the emulated device, or ``None`` if it can.

    Needs the per-device codegen and op-override tables, Dynamo's device-interface table, and
    the Python wrapper's per-call hook that picks the kernel-call form
    (``PythonWrapperCodegen._generate_kernel_call_helper``), and no strict memory
    (``strict_memory``; ``None``: as the installed device has it).
    """
    if strict_memory is None:
        from anyaccel.emulated.state import installed_spec

        spec = installed_spec()
        strict_memory = spec is not None and spec.strict_memory
    if strict_memory:
        return STRICT_MEMORY_REASON
    try:
        from torch._dynamo.device_interface import (  # noqa: F401
            DeviceInterface,
            register_interface_for_device,
        )
        from torch._inductor.codegen.common import (  # noqa: F401
            DeviceOpOverrides,
            register_backend_for_device,
            register_device_op_overrides,
        )
        from torch._inductor.codegen.cpp import CppScheduling  # noqa: F401
        from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    except ImportError as exc:
        return f"torch {torch.__version__}'s inductor lacks a device registration point ({exc})"
    if not hasattr(PythonWrapperCodegen, "_generate_kernel_call_helper"):
        return (
            f"torch {torch.__version__}'s inductor wrapper has no per-call kernel hook "
            "(_generate_kernel_call_helper)"
        )
    return None


def _refusal(message: str) -> type:
    """A codegen class that raises ``RuntimeError(message)`` whenever inductor touches it."""

    class Refusing(type):
        def __getattr__(cls, name: str) -> NoReturn:
            raise RuntimeError(message)

        def __call__(cls, *args: Any, **kwargs: Any) -> NoReturn:
            raise RuntimeError(message)

    return Refusing("InductorRefusal", (), {})


def _refuse(device_type: str, reason: str) -> bool:
    """Make inductor refuse ``device_type`` with a clear message; whether the hook is in place."""
    try:
        from torch._inductor.codegen.common import register_backend_for_device
    except ImportError as exc:  # inductor moved its table: torch's own error stays
        logger.debug("inductor's codegen table is not where expected (%s)", exc)
        return False
    refusing = _refusal(
        f"torch.compile's inductor backend cannot generate code for the emulated {device_type!r} "
        f"device ({reason}); compile with backend='aot_eager' "
        "(get_accelerator().get_compile_backend() names it) or 'eager'"
    )
    register_backend_for_device(device_type, refusing, refusing)
    return True


def register_inductor(device_type: str, strict_memory: bool = False) -> bool:
    """Let inductor compile for ``device_type`` with the CPU's C++ kernels; whether it can.

    Where :func:`inductor_unsupported_reason` names a reason (an older torch, strict memory),
    inductor refuses the device with a message naming ``aot_eager`` and this returns ``False``.
    """
    reason = inductor_unsupported_reason(strict_memory)
    if reason is not None:
        logger.debug("inductor refuses the emulated device: %s", reason)
        _refuse(device_type, reason)
        return False
    from torch._dynamo.device_interface import register_interface_for_device
    from torch._inductor.codegen.common import (
        register_backend_for_device,
        register_device_op_overrides,
    )
    from torch._inductor.codegen.cpp import CppScheduling

    register_device_op_overrides(device_type, _op_overrides(device_type))
    cpp_wrapper = _refusal(
        f"inductor's C++ wrapper (cpp_wrapper=True) is not supported on the emulated "
        f"{device_type!r} device; compile without it (the default Python wrapper works)"
    )
    register_backend_for_device(
        device_type, CppScheduling, _wrapper_codegen(device_type), cpp_wrapper
    )
    register_interface_for_device(device_type, _device_interface(device_type))
    _skip_fusion_passes_the_cpu_skips()
    _name_the_cpp_backend_for(device_type)
    return True


#: The device types whose kernels inductor's C++ backend writes (:func:`_name_the_cpp_backend_for`).
_CPP_DEVICE_TYPES: set[str] = set()


def _name_the_cpp_backend_for(device_type: str) -> None:
    """Make inductor's ``get_current_backend`` say ``"cpp"`` for ``device_type``.

    It answers ``config.cpu_backend`` for the CPU and ``config.cuda_backend`` ("triton") for
    any device it does not know, and the C++ code generator's type propagation branches on that
    answer: with "triton" a vectorised mask reduction gets no source dtype
    (``InductorError: KeyError: None``). The answer for every other device is unchanged.
    """
    from torch._inductor import utils
    from torch._inductor.codegen import common

    _CPP_DEVICE_TYPES.add(device_type)
    for module in (utils, common):
        original = getattr(module, "get_current_backend", None)
        if original is None or getattr(original, "_anyaccel_cpp_types", None) is _CPP_DEVICE_TYPES:
            continue  # a torch without it (nothing branches on it there), or already wrapped

        def get_current_backend(device_type: str | None = None, _original: Any = original) -> str:
            if not device_type:
                from torch._inductor.virtualized import V

                device_type = V.graph.get_current_device_or_throw().type
            if device_type in _CPP_DEVICE_TYPES:
                return "cpp"
            return str(_original(device_type))

        get_current_backend._anyaccel_cpp_types = _CPP_DEVICE_TYPES  # type: ignore[attr-defined]
        setattr(module, "get_current_backend", get_current_backend)  # noqa: B010


#: inductor's fusion passes that its scheduler skips for CPU nodes ("not validated for CPU
#: codegen") but runs for any other device, assuming GPU-shaped (SIMD) kernels; on the
#: device's C++ kernels they fail (a TypeError in the reindexing pass, torch 2.13).
CPU_SKIPPED_FUSION_PASSES = ("loop_reindexing_after_fusion", "loop_index_inversion_in_fusion")


def _skip_fusion_passes_the_cpu_skips() -> None:
    """Turn off, for this process, the fusion passes inductor never runs on CPU nodes.

    The CPU's compiled code is unchanged (those passes return early for it); a real GPU in the
    same process would lose them.
    """
    from torch._inductor import config

    for name in CPU_SKIPPED_FUSION_PASSES:
        if getattr(config, name, False):
            logger.debug("inductor: %s off (skipped for the CPU, fails on C++ kernels)", name)
            setattr(config, name, False)


def _op_overrides(device_type: str) -> Any:
    """The lines inductor's Python wrapper writes for the device's guard, set_device, sync."""
    from torch._inductor.codegen.common import DeviceOpOverrides

    module = f"torch.{device_type}"

    class EmulatedDeviceOpOverrides(DeviceOpOverrides):
        def import_get_raw_stream_as(self, name: str) -> str:
            # the C++ kernels take no stream; the wrapper still names one per device
            return f"def {name}(index):\n    return 0\n"

        def set_device(self, device_idx: int) -> str:
            return f"{module}.set_device({device_idx})"

        def synchronize(self) -> str:
            return f"{module}.synchronize()"

        def device_guard(self, device_idx: int) -> str:
            return f"{module}.device({device_idx})"

        def cpp_kernel_type(self) -> str:
            return "void*"

    return EmulatedDeviceOpOverrides()


def _wrapper_codegen(device_type: str) -> type:
    """inductor's Python wrapper (and its subgraphs'), calling the device's C++ kernels as the
    CPU's are called and allocating on the device by index."""
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen

    class OnTheDevice:
        """What the device's wrappers change in torch's, for the graph and its subgraphs."""

        def make_allocation(
            self, name: str, device: torch.device, *args: Any, **kwargs: Any
        ) -> str:
            # inductor writes device='<type>' for a device it does not guard, which would
            # allocate on the current device: name the index (npu:1 stays npu:1)
            line: str = super().make_allocation(name, device, *args, **kwargs)  # type: ignore[misc]
            if device.type != device_type or device.index is None:
                return line
            return line.replace(f"device='{device_type}'", f"device='{device}'")

        def _generate_kernel_call_helper(
            self, kernel_name: str, call_args: Any, *, device: Any = None, **kwargs: Any
        ) -> None:
            from torch._inductor.virtualized import V

            device = device or V.graph.get_current_device_or_throw()
            if device.type == device_type:  # a C++ kernel over host pointers, as on the CPU
                device = torch.device("cpu")
            super()._generate_kernel_call_helper(  # type: ignore[misc]
                kernel_name, call_args, device=device, **kwargs
            )

    class EmulatedSubgraphWrapperCodegen(OnTheDevice, SubgraphPythonWrapperCodegen):
        pass

    class EmulatedWrapperCodegen(OnTheDevice, PythonWrapperCodegen):
        @staticmethod
        def create(
            is_subgraph: bool, subgraph_name: str | None, parent_wrapper: Any, *args: Any
        ) -> Any:
            if is_subgraph and subgraph_name is not None:
                return EmulatedSubgraphWrapperCodegen(subgraph_name, parent_wrapper, *args)
            return EmulatedWrapperCodegen()  # type: ignore[no-untyped-call]

    EmulatedWrapperCodegen.__name__ = f"EmulatedWrapperCodegen_{device_type}"
    return EmulatedWrapperCodegen


def _device_interface(device_type: str) -> type:
    """Dynamo's runtime interface for the device, over ``torch.<type>`` (anyaccel's module)."""
    from torch._dynamo.device_interface import DeviceInterface

    from anyaccel.emulated import torch_module

    class _Worker:
        """What inductor's compile workers ask (each process has the device installed)."""

        @staticmethod
        def set_device(index: int) -> None:
            torch_module.set_device(index)

        @staticmethod
        def current_device() -> int:
            return torch_module.current_device()

        @staticmethod
        def get_device_properties(index: Any = None) -> Any:
            return torch_module.get_device_properties(index)

    class EmulatedDeviceInterface(DeviceInterface):
        device = torch_module.device
        Event = torch.Event
        Stream = torch.Stream
        Worker = _Worker  # type: ignore[assignment]

        @staticmethod
        def current_device() -> int:
            return torch_module.current_device()

        @staticmethod
        def set_device(index: Any) -> None:
            torch_module.set_device(index)

        @staticmethod
        def exchange_device(index: int) -> int:
            previous = torch_module.current_device()
            if index >= 0 and index != previous:
                torch_module.set_device(index)
            return previous

        @staticmethod
        def maybe_exchange_device(index: int) -> int:
            return EmulatedDeviceInterface.exchange_device(index)

        @staticmethod
        def device_count() -> int:
            return torch_module.device_count()

        @staticmethod
        def is_available() -> bool:
            return torch_module.is_available()

        @staticmethod
        def stream(stream: torch.Stream) -> Any:
            return torch_module.stream(stream)

        @staticmethod
        def current_stream() -> torch.Stream:
            return torch_module.current_stream()

        @staticmethod
        def set_stream(stream: torch.Stream) -> None:
            torch_module.set_stream(stream)

        @staticmethod
        def get_raw_stream(index: int) -> int:
            return 0

        @staticmethod
        def synchronize(index: Any = None) -> None:
            torch_module.synchronize(index)

        @staticmethod
        def get_compute_capability(index: Any = None) -> str:
            major, minor = torch_module.get_device_capability(index)
            return f"{major}{minor}"

        @staticmethod
        def is_bf16_supported(including_emulation: bool = False) -> bool:
            return torch_module.is_bf16_supported(including_emulation)

        @staticmethod
        def memory_allocated(index: Any = None) -> int:
            return torch_module.memory_allocated(index)

    EmulatedDeviceInterface.__name__ = f"EmulatedDeviceInterface_{device_type}"
    return EmulatedDeviceInterface
