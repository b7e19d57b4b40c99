"""Installing the emulated device in this process, and the native core's Python face.

Nothing here runs at import: ``install`` builds (once, cached) and loads the native core, names
PrivateUse1 after the chosen device type and registers ``torch.<type>``. torch lets a process
name PrivateUse1 once, so a process has one emulated device type, installed once.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from anyaccel.forksafe import ForkSafeLock
from anyaccel.ops.emulated.core import (
    EmulatedDeviceError,
    installed_spec,
    native,
    set_installed,
    set_native,
)
from anyaccel.ops.emulated.settings import EmulatedSpec

if TYPE_CHECKING:
    import torch

__all__ = [
    "MINIMUM_TORCH",
    "EmulatedDeviceError",
    "device_tensor_from_host",
    "host_view",
    "install",
    "installed_spec",
    "native",
]

#: The oldest torch the native core is built and tested against: its PrivateUse1 hooks,
#: device guard and allocator interfaces changed release by release before it.
MINIMUM_TORCH = (2, 13)

_lock = ForkSafeLock()


def _torch_version() -> tuple[int, int]:
    import torch

    major, minor = (int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    return major, minor


def _check_privateuse1_free(device_type: str) -> None:
    import torch

    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", device_type):
        raise EmulatedDeviceError(
            f"torch's PrivateUse1 device already belongs to {current!r} in this process, so it "
            f"cannot become the emulated {device_type!r}; install the emulated device in a "
            f"process that has not loaded {current!r}'s runtime, or name it {current!r}"
        )
    existing = getattr(torch, device_type, None)
    if current == "privateuseone" and existing is not None:
        raise EmulatedDeviceError(
            f"torch.{device_type} already exists (another runtime registered it), so the emulated "
            f"device cannot take the name {device_type!r}; choose another device_type"
        )


def install(spec: EmulatedSpec) -> ModuleType:
    """Make ``spec``'s devices real in this process and return ``torch.<type>``.

    Idempotent for the same spec. Raises ``EmulatedDeviceError`` when torch is older than
    ``MINIMUM_TORCH``, when PrivateUse1 already belongs to another name, or when this process
    installed a different spec; the native build's ``OpError`` when it cannot be built.
    """
    with _lock:
        installed = installed_spec()
        if installed is not None:
            if installed != spec:
                raise EmulatedDeviceError(
                    f"this process already installed the emulated device as {installed}; it "
                    f"cannot also be {spec} (torch names PrivateUse1 once per process): run "
                    "the other configuration in its own process"
                )
            import torch

            module: ModuleType = getattr(torch, spec.device_type)
            return module
        version = _torch_version()
        if version < MINIMUM_TORCH:
            import torch

            raise EmulatedDeviceError(
                f"the emulated device needs torch >= {MINIMUM_TORCH[0]}.{MINIMUM_TORCH[1]} "
                f"(its PrivateUse1 hooks and device guard interfaces); this is torch "
                f"{torch.__version__}: upgrade torch to use it"
            )
        _check_privateuse1_free(spec.device_type)
        from anyaccel.ops.emulated.builder import EmulatedDeviceBuilder

        loaded = EmulatedDeviceBuilder().load()
        capacity = -1 if spec.memory_capacity is None else int(spec.memory_capacity)
        loaded.configure(spec.device_count, capacity)
        set_native(loaded)
        module = _register_torch_names(spec)
        set_installed(spec)
        from anyaccel.ops.emulated.shutdown import register_exit_drain

        register_exit_drain(spec.device_type, spec.device_count)  # see its module: no abort
        return module


def _register_torch_names(spec: EmulatedSpec) -> ModuleType:
    """Name PrivateUse1, register ``torch.<type>`` and the ``Tensor.<type>()`` family."""
    import torch
    from torch.utils.backend_registration import (
        generate_methods_for_privateuse1_backend,
        rename_privateuse1_backend,
    )

    from anyaccel.ops.emulated import device_module
    from anyaccel.ops.emulated.inductor import refuse_inductor

    if torch._C._get_privateuse1_backend_name() != spec.device_type:
        rename_privateuse1_backend(spec.device_type)
    if getattr(torch, spec.device_type, None) is not device_module:
        torch._register_device_module(spec.device_type, device_module)  # type: ignore[no-untyped-call]
    device_module._attach(spec)
    refuse_inductor(spec.device_type)
    if not hasattr(torch.Tensor, spec.device_type):
        generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )
    return device_module


def host_view(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over ``tensor``'s device memory: same sizes, strides and offset; writes to
    either show in both. It keeps the device memory alive while it lives."""
    result: torch.Tensor = native().host_view(tensor)
    return result


def device_tensor_from_host(host: torch.Tensor, device: torch.device | str | int) -> torch.Tensor:
    """A device tensor over ``host``'s memory (no copy), counted on ``device``'s memory while it
    lives; ``host`` stays valid and shares every write."""
    import torch

    if isinstance(device, int):
        index = device
    else:
        resolved = torch.device(device)
        native()
        installed = installed_spec()
        if installed is None or resolved.type != installed.device_type:
            raise EmulatedDeviceError(
                f"device_tensor_from_host needs a device of the emulated type, got {device!r}"
            )
        index = resolved.index if resolved.index is not None else native().current_device()
    result: torch.Tensor = native().device_tensor_from_host(host, index)
    return result
