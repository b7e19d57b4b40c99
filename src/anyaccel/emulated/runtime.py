"""Installing the emulated device in this process, and the native core's Python face.

Nothing here runs at import: ``install`` builds (once, cached) and loads the native core, names
PrivateUse1 after the chosen device type and registers ``torch.<type>``. torch lets a process
name PrivateUse1 once, so a process has one emulated device type, installed once (the rule and
its message are ``state.check_installable``'s).
"""

from __future__ import annotations

import os
import re
from types import ModuleType
from typing import TYPE_CHECKING

from anyaccel.emulated.spec import EmulatedSpec, visible_devices, visible_devices_env
from anyaccel.emulated.state import (
    MINIMUM_TORCH,
    EmulatedDeviceError,
    check_installable,
    installed_spec,
    native,
    record_installed,
    record_native,
)
from anyaccel.forksafe import ForkSafeLock

if TYPE_CHECKING:
    import torch

__all__ = [
    "CPU_OPS_ENV",
    "MINIMUM_TORCH",
    "EmulatedDeviceError",
    "allow_cpu_kernels",
    "allowed_cpu_kernels",
    "device_tensor_from_host",
    "host_view",
    "install",
    "installed_spec",
    "native",
]

_lock = ForkSafeLock()

#: Ops or namespaces (comma-separated: ``mylib``, ``mylib::op``, ``mylib::op.out``) whose CPU
#: kernels the device may run besides torch's own (aten, prims) and torchvision's.
CPU_OPS_ENV = "ANYACCEL_EMULATED_CPU_OPS"
_OP_NAME = re.compile(r"^[A-Za-z_]\w*(::[A-Za-z_]\w*(\.\w+)?)?$")


def _checked_op_names(names: list[str], source: str) -> list[str]:
    """``names`` stripped, each a namespace or ``namespace::op[.overload]``, else refused."""
    cleaned = [name.strip() for name in names if name.strip()]
    for name in cleaned:
        if not _OP_NAME.match(name):
            raise EmulatedDeviceError(
                f"{source}: {name!r} is not an op or a namespace; write 'mylib' (every op of "
                "the namespace), 'mylib::op' or 'mylib::op.overload'"
            )
    return cleaned


def allow_cpu_kernels(*names: str) -> None:
    """Let the emulated device run these ops' CPU kernels (``"mylib"``, ``"mylib::op"``).

    Without it an op that has no kernel for the device and is not torch's own (aten, prims)
    or torchvision's fails with torch's ``NotImplementedError``, as on a GPU. For a vendor
    bringing its ops up one at a time. Raises ``EmulatedDeviceError`` for a malformed name or
    before ``install``.
    """
    native().allow_cpu_kernels(_checked_op_names(list(names), "allow_cpu_kernels"))


def allowed_cpu_kernels() -> list[str]:
    """The ops and namespaces allowed beyond torch's own and torchvision's, sorted."""
    allowed: list[str] = native().allowed_cpu_kernels()
    return allowed


def install(spec: EmulatedSpec, visible_env: str | None = None) -> ModuleType:
    """Make ``spec``'s devices real in this process and return ``torch.<type>``.

    The devices the visible-devices variable ``visible_env`` lists (``<TYPE>_VISIBLE_DEVICES``
    when ``None``; all when it is unset) become ``<type>:0 ..``, as a vendor runtime shows them.
    Idempotent for the same spec. Raises ``EmulatedDeviceError`` when torch is older than
    ``MINIMUM_TORCH``, when PrivateUse1 already belongs to another name, or when this process
    installed a different spec; ``InvalidSettingError`` for a bad visible-devices value; the
    native build's ``OpError`` when it cannot be built.
    """
    import torch

    with _lock:
        if check_installable(spec):
            module: ModuleType = getattr(torch, spec.device_type)
            return module
        from anyaccel.emulated.native_builders import EmulatedDeviceBuilder

        variable = visible_env or visible_devices_env(spec.device_type)
        shown = visible_devices(variable, spec.device_count)
        loaded = EmulatedDeviceBuilder().load()
        capacity = -1 if spec.memory_capacity is None else int(spec.memory_capacity)
        allowed = _checked_op_names(os.environ.get(CPU_OPS_ENV, "").split(","), CPU_OPS_ENV)
        loaded.configure(len(shown), capacity, spec.strict_memory)
        loaded.allow_cpu_kernels(allowed)
        record_native(loaded)
        module = _register_torch_names(spec)
        record_installed(spec)
        from anyaccel.emulated.shutdown import register_exit_drain

        register_exit_drain(spec.device_type, len(shown))  # see its module: no abort
        from anyaccel.emulated.stream_sanitizer import enable_from_environment

        enable_from_environment()
        return module


def _register_torch_names(spec: EmulatedSpec) -> ModuleType:
    """Name PrivateUse1, register ``torch.<type>`` and the ``Tensor.<type>()`` family."""
    import torch
    from torch.utils.backend_registration import (
        generate_methods_for_privateuse1_backend,
        rename_privateuse1_backend,
    )

    from anyaccel.emulated import torch_module
    from anyaccel.emulated.inductor import register_inductor

    if torch._C._get_privateuse1_backend_name() != spec.device_type:
        rename_privateuse1_backend(spec.device_type)
    if getattr(torch, spec.device_type, None) is not torch_module:
        torch._register_device_module(spec.device_type, torch_module)  # type: ignore[no-untyped-call]
    torch_module.attach()
    register_inductor(spec.device_type, spec.strict_memory)
    if not hasattr(torch.Tensor, spec.device_type):
        generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )
    return torch_module


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
