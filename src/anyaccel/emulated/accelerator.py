"""emulated: torch's PrivateUse1 device computing in host memory, under any device-type name.

Runtime: anyaccel's own native core (``anyaccel.emulated.runtime``, built on first use), which
attaches ``torch.<type>``. Chosen only by ``DS_ACCELERATOR=emulated``, configured by
``ANYACCEL_EMULATED=<type>:<count>[:<capacity>]`` (``emu:2`` by default), or made in-process by
``anyaccel.testing.emulated.install()``. Collectives: ``emuccl``, or the vendor's own name where
the type stands in for a vendor (``npu`` -> ``hccl``, as its backend says). Ops: the host (CPU)
builders, since kernels run on the host.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
from typing import Any

from anyaccel.abstract import Accelerator
from anyaccel.backends.torch_module import TorchModuleAccelerator
from anyaccel.emulated.checkpoints import register_checkpoint_hint
from anyaccel.emulated.spec import (
    DEFAULT_DEVICE_TYPE,
    EMULATED_ENV,
    EmulatedSpec,
    parse_capacity,
    spec_from_environment,
    visible_devices,
    visible_devices_env,
)
from anyaccel.emulated.state import installed_spec, native
from anyaccel.instance_defaults import value_before_init
from anyaccel.probe import FORCE_ENV, ProbeOutcome, forced_name

__all__ = [
    "DEFAULT_COMMUNICATION_BACKEND",
    "EmulatedAccelerator",
    "install",
    "probe",
    "vendor_backend",
]

logger = logging.getLogger(__name__)

#: The collectives backend of an emulated type that stands in for no vendor.
DEFAULT_COMMUNICATION_BACKEND = "emuccl"
#: The name ``DS_ACCELERATOR`` gives this backend.
NAME = "emulated"


def probe() -> ProbeOutcome:
    """Available only when asked for: ``DS_ACCELERATOR=emulated`` (with valid settings), or
    ``install()`` made the devices in this process (``reset_accelerator()`` keeps them).

    Without them it registers :func:`~anyaccel.emulated.checkpoints.register_checkpoint_hint`
    (cheap; torch is imported by the probes before this one).
    """
    installed = installed_spec()
    if forced_name() != NAME and installed is not None:
        count = int(native().device_count())
        return ProbeOutcome.found(
            f"{count} emulated {installed.device_type!r} device(s), installed in this process",
            count,
        )
    if forced_name() != NAME:
        # no emulated device here: a checkpoint saved on one gets a load error naming the setting
        register_checkpoint_hint()
        return ProbeOutcome.no_device(
            f"emulated devices are used only when asked for ({FORCE_ENV}={NAME})",
            f"Set {FORCE_ENV}={NAME} (and {EMULATED_ENV}=<type>:<count>[:<capacity>]) to run "
            "on emulated devices.",
        )
    spec = spec_from_environment()
    variable = visible_env_names(spec.device_type)[0]
    count = len(visible_devices(variable, spec.device_count))
    shown = f", {variable}" if variable in os.environ else ""
    return ProbeOutcome.found(
        f"{count} emulated {spec.device_type!r} device(s) ({EMULATED_ENV}{shown})", count
    )


def vendor_backend(device_type: str) -> type[Accelerator] | None:
    """anyaccel's backend class for the vendor named ``device_type`` (``npu``), or ``None``."""
    if device_type == NAME:
        return None
    try:
        module = importlib.import_module(f"anyaccel.backends.{device_type}")
    except ImportError:
        return None
    for _, value in inspect.getmembers(module, inspect.isclass):
        if issubclass(value, Accelerator) and vars(value).get("_name") == device_type:
            return value
    return None


def visible_env_names(device_type: str) -> tuple[str, ...]:
    """The visible-devices variables of ``device_type``: its vendor's (``npu``:
    ``ASCEND_RT_VISIBLE_DEVICES``), else ``<TYPE>_VISIBLE_DEVICES``; the device reads the first."""
    vendor = vendor_backend(device_type)
    if vendor is not None and vendor.visible_devices_env_names:
        return tuple(vendor.visible_devices_env_names)
    return (visible_devices_env(device_type),)


def _communication_backend(device_type: str) -> str:
    """The vendor backend's collectives name where ``device_type`` is a vendor's, else emuccl.

    A vendor whose collectives go by one of torch's own names (klxpu's nccl) gets emuccl too:
    torch keeps those names, so the emulation could not register under them.
    """
    from anyaccel.emulated.collective_registration import TORCH_BACKENDS

    vendor = vendor_backend(device_type)
    if vendor is None:
        return DEFAULT_COMMUNICATION_BACKEND
    name: str = value_before_init(vendor, "_communication_backend_name")
    return DEFAULT_COMMUNICATION_BACKEND if name in TORCH_BACKENDS else name


class EmulatedAccelerator(TorchModuleAccelerator):
    """Emulated devices in host memory, driven through the ``torch.<type>`` the core registers."""

    #: decided on the first ask: inductor where this torch's inductor can compile for the
    #: device, else aot_eager (inductor refuses it there, naming that one)
    _compile_backend = None
    profiler_module_name = None

    def __init__(self, spec: EmulatedSpec | None = None) -> None:
        if spec is None:  # the devices this process installed, else those ANYACCEL_EMULATED names
            spec = installed_spec() or spec_from_environment()
        self._spec = spec
        self._name = self._spec.device_type
        self.device_module_name = self._spec.device_type  # type: ignore[misc]
        self._communication_backend_name = _communication_backend(self._spec.device_type)
        self.visible_devices_env_names = visible_env_names(self._spec.device_type)  # type: ignore[misc]
        super().__init__()

    @property
    def spec(self) -> EmulatedSpec:
        """The devices this accelerator emulates."""
        return self._spec

    def get_compile_backend(self) -> str | None:
        """``"inductor"`` where this torch's inductor compiles for the device, else ``"aot_eager"``
        (or what ``set_compile_backend`` chose)."""
        if self._compile_backend is None:
            from anyaccel.emulated.inductor import inductor_unsupported_reason

            supported = inductor_unsupported_reason() is None
            self._compile_backend = "inductor" if supported else "aot_eager"
        return self._compile_backend

    def _load_device_module(self) -> Any:
        """Install the emulated devices in this process (once) and return ``torch.<type>``.

        Their collective backend is registered with torch under this accelerator's
        ``communication_backend_name()`` (a warning says why not, if it cannot be).
        """
        from anyaccel.emulated import runtime
        from anyaccel.emulated.collective_registration import register_collectives
        from anyaccel.emulated.state import EmulatedDeviceError

        module = runtime.install(self._spec, self.visible_devices_env_names[0])
        try:
            register_collectives(self._spec.device_type, self._communication_backend_name)
        except EmulatedDeviceError as exc:
            logger.warning("the emulated devices have no collectives: %s", exc)
        return module

    def op_builder_dir(self) -> str:
        """The host (CPU) builders: the device's kernels run on the host."""
        from anyaccel.ops.registry import HOST_PACKAGE

        return HOST_PACKAGE

    def is_bf16_supported(self) -> bool:
        """bfloat16 computes on the host kernels."""
        return True

    def is_triton_supported(self) -> bool:
        """No Triton backend targets the emulated device."""
        return False


def install(
    device_type: str = DEFAULT_DEVICE_TYPE,
    device_count: int = 2,
    memory_capacity: int | str | None = None,
    strict_memory: bool = False,
) -> EmulatedAccelerator:
    """Install ``device_count`` emulated devices named ``device_type`` and return their accelerator.

    ``memory_capacity`` caps each device (bytes, or a size such as ``"2GiB"``); beyond it an
    allocation raises ``torch.OutOfMemoryError``. ``strict_memory`` keeps device memory out of
    the host's reach outside the device's kernels: a host library reading a device tensor's
    ``data_ptr()`` dies with SIGSEGV, as on a GPU (docs/emulated.md). Idempotent for the same
    arguments. Raises ``ValueError`` for a bad argument and ``EmulatedDeviceError`` when torch is
    older than ``MINIMUM_TORCH``, when PrivateUse1 already belongs to another name in this
    process, or when this process installed other arguments. ``get_accelerator()`` then chooses
    these devices in this process, after ``reset_accelerator()`` too (they stay installed),
    unless ``DS_ACCELERATOR`` names another backend.
    """
    spec = EmulatedSpec(device_type, device_count, parse_capacity(memory_capacity), strict_memory)
    return EmulatedAccelerator(spec)
