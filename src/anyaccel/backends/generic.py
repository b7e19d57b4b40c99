"""generic: any device PyTorch itself knows but anyaccel has no file for.

Runtime: whatever registered the device with torch — a PrivateUse1 backend renamed through
``torch.utils.rename_privateuse1_backend`` with its module registered by
``torch._register_device_module``, or the device ``torch.accelerator`` reports (torch ≥ 2.6;
older torch falls back to the PrivateUse1 name). Name: the device type itself, so
``DS_ACCELERATOR`` accepts both ``generic`` and, e.g., ``foo`` for a ``foo`` device.
Collectives: torch.distributed's default for the device type, else ``gloo``. Visible devices:
``<TYPE>_VISIBLE_DEVICES`` by the usual vendor convention. Probed after the named backends.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from anyaccel.backends.runtime_probe import RuntimeCheck, count_devices
from anyaccel.backends.torch_module import TorchModuleAccelerator
from anyaccel.errors import AcceleratorUnavailableError, UnsupportedFeatureError
from anyaccel.probe import FORCE_ENV, BackendCandidate, ProbeOutcome

__all__ = ["GENERIC_PRIORITY", "GenericAccelerator", "device_alias_candidate", "probe"]

#: Where the generic backend sits in the cascade: after every named backend, before cpu.
GENERIC_PRIORITY = 950

_REMEDY = (
    "Install and import the vendor's PyTorch extension (it registers its device with torch), "
    f"or choose a backend with {FORCE_ENV}."
)


#: A device anyaccel has no file for: only the vendor knows its status tool.
_CHECK = RuntimeCheck(
    "the vendor's own status tool lists the devices", "the vendor's driver and PyTorch extension"
)


def _privateuse1_name() -> str:
    getter = getattr(torch._C, "_get_privateuse1_backend_name", None)
    return str(getter()) if getter is not None else "privateuseone"


def torch_device_type() -> tuple[str | None, str]:
    """The accelerator device type torch knows here (or ``None``), and how it was found."""
    api = getattr(torch, "accelerator", None)
    current = getattr(api, "current_accelerator", None)
    if current is not None:
        device = current()  # compile-time answer: creates no device context
        if device is not None and device.type != "cpu":
            return str(device.type), "torch.accelerator"
    name = _privateuse1_name()
    if name != "privateuseone":
        return name, "PrivateUse1"
    where = "torch.accelerator reports none" if current is not None else "no torch.accelerator"
    return None, f"torch {torch.__version__}: {where} and no PrivateUse1 backend is renamed"


def _device_module(device_type: str) -> Any | None:
    lookup = getattr(torch, "get_device_module", None)
    if lookup is not None:
        try:
            return lookup(device_type)
        except RuntimeError:
            return None
    return getattr(torch, device_type, None)


def probe() -> ProbeOutcome:
    """Ask torch which accelerator it knows, and that device's module how many it sees."""
    device_type, how = torch_device_type()
    if device_type is None:
        return ProbeOutcome.not_installed(how, _REMEDY)
    module = _device_module(device_type)
    if module is None:
        return ProbeOutcome.broken(
            f"torch knows device type {device_type!r} ({how}) but no torch.{device_type} module",
            f"The extension providing {device_type!r} should call "
            f"torch._register_device_module({device_type!r}, module).",
        )
    count = count_devices(module.device_count, f"torch.{device_type}", "its extension", _CHECK)
    if isinstance(count, ProbeOutcome):
        return count
    if count <= 0:
        return ProbeOutcome.no_device(
            f"torch.{device_type}.device_count() is 0 ({how})",
            f"Check that the {device_type!r} devices are visible to this process.",
        )
    return ProbeOutcome.found(f"{count} {device_type!r} device(s) ({how})", count)


def device_alias_candidate(registered_names: set[str]) -> BackendCandidate | None:
    """A candidate named after torch's own device type, unless a backend already has that name."""
    device_type, how = torch_device_type()
    if device_type is None or device_type in registered_names:
        return None
    return BackendCandidate(
        device_type,
        f"{device_type} (generic, {how})",
        GENERIC_PRIORITY,
        "anyaccel.backends.generic:probe",
        "anyaccel.backends.generic:GenericAccelerator",
    )


def _default_comm_backend(device_type: str) -> str:
    try:
        import torch.distributed as dist

        backend_map: dict[str, str] = dict(dist.Backend.default_device_backend_map)
    except (ImportError, AttributeError):
        return "gloo"
    return backend_map.get(device_type, "gloo")


class GenericAccelerator(TorchModuleAccelerator):
    """A device registered with torch, driven through ``torch.<type>`` and ``torch.accelerator``."""

    _compile_backend = "inductor"

    @classmethod
    def runtime_absent(cls) -> str | None:
        """No device type torch knows of (torch's compile-time answer: no device context)."""
        device_type, how = torch_device_type()
        return how if device_type is None else None

    def __init__(self, device_type: str | None = None, device_module: Any | None = None) -> None:
        if device_type is None:
            device_type, how = torch_device_type()
            if device_type is None:
                raise AcceleratorUnavailableError("generic", "not_installed", how, _REMEDY)
        module = device_module if device_module is not None else _device_module(device_type)
        if module is None:
            raise UnsupportedFeatureError(
                device_type,
                f"the device module torch.{device_type}",
                f"Register it with torch._register_device_module({device_type!r}, module).",
            )
        self._name = device_type
        self.device_module_name = device_type  # type: ignore[misc]
        self.visible_devices_env_names = (f"{device_type.upper()}_VISIBLE_DEVICES",)  # type: ignore[misc]
        self._communication_backend_name = _default_comm_backend(device_type)
        super().__init__(module)

    def _accelerator_api(self, name: str) -> Any | None:
        """``torch.accelerator.<name>``, when torch's current accelerator is this device."""
        api: ModuleType | None = getattr(torch, "accelerator", None)
        current = getattr(api, "current_accelerator", None)
        if current is None:
            return None
        device = current()
        if device is None or device.type != self._name:
            return None
        return getattr(api, name, None)

    def _module_or_api(self, module_name: str, api_name: str) -> Any:
        function = self._optional(module_name) or self._accelerator_api(api_name)
        if function is None:
            raise UnsupportedFeatureError(self._name, f"torch.{self._name}.{module_name}")
        return function

    # ------------------------------------------------------------------ device
    def set_device(self, device_index: int) -> None:
        """Make ``device_index`` current (the module's ``set_device`` or torch.accelerator's)."""
        self._module_or_api("set_device", "set_device_index")(device_index)

    def current_device(self) -> int:
        """The current device index."""
        return int(self._module_or_api("current_device", "current_device_index")())

    def current_device_name(self) -> str:
        """The current device as a string, e.g. ``'foo:0'``."""
        return f"{self._name}:{self.current_device()}"

    def _index(self, device_index: int | None) -> int:
        return self.current_device() if device_index is None else int(device_index)

    def synchronize(self, device_index: int | None = None) -> None:
        """Wait for queued work on the device."""
        self._module_or_api("synchronize", "synchronize")(device_index)

    def is_available(self) -> bool:
        """Whether the device module reports a usable device."""
        function = self._optional("is_available")
        return bool(function()) if function is not None else self.device_count() > 0

    # ------------------------------------------------------------------ memory
    def _memory_figure(self, name: str, device_index: int | None, fallback: str) -> int:
        function = self._optional(name) or self._optional(fallback) or self._accelerator_api(name)
        if function is None:
            raise UnsupportedFeatureError(self._name, name)
        return int(function(device_index))

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        """Restart every peak figure."""
        function = self._optional("reset_peak_memory_stats") or self._accelerator_api(
            "reset_peak_memory_stats"
        )
        if function is not None:
            function(device_index)

    def total_memory(self, device_index: int | None = None) -> int:
        """Capacity from ``get_device_properties``, else ``torch.accelerator.get_memory_info``."""
        index = self._index(device_index)
        properties = self._optional("get_device_properties")
        if properties is not None:
            return int(properties(index).total_memory)
        info = self._optional("mem_get_info") or self._accelerator_api("get_memory_info")
        if info is None:
            raise UnsupportedFeatureError(self._name, "total_memory")
        _free, total = info(index)
        return int(total)
