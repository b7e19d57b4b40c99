"""What an emulated device is: its type name, how many, how much memory, whether its memory is
strict; read from arguments or ``ANYACCEL_EMULATED``."""

from __future__ import annotations

import os
import re

from anyaccel.errors import InvalidSettingError
from anyaccel.probe import FrozenRecord
from anyaccel.settings import EMULATED_ENV

__all__ = [
    "DEFAULT_DEVICE_TYPE",
    "EMULATED_ENV",
    "STRICT_MEMORY_FLAG",
    "EmulatedSpec",
    "parse_capacity",
    "parse_spec",
    "spec_from_environment",
    "visible_devices",
    "visible_devices_env",
]

#: The device type when none is named.
DEFAULT_DEVICE_TYPE = "emu"
#: The most devices one process may emulate: the native core's table size (its builder passes
#: it to the compiler, so this is its one definition).
MAX_DEVICES = 64

#: The ``ANYACCEL_EMULATED`` field that turns strict memory on (``npu:2:strict_memory``).
STRICT_MEMORY_FLAG = "strict_memory"

_FORMAT = (
    f"<type>:<count>[:<capacity>][:{STRICT_MEMORY_FLAG}], e.g. 'emu:2', 'npu:8:16GiB' or "
    f"'npu:2:{STRICT_MEMORY_FLAG}'"
)
_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "k": 2**10,
    "kib": 2**10,
    "m": 2**20,
    "mib": 2**20,
    "g": 2**30,
    "gib": 2**30,
    "t": 2**40,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_TYPE = re.compile(r"^[a-z][a-z0-9_]*$")
#: Device types torch itself owns: the emulated device takes PrivateUse1's place, not theirs.
_TORCH_TYPES = frozenset(
    {"cpu", "cuda", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga", "maia", "xla",
     "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "xpu", "ipu", "privateuseone"}
)  # fmt: skip


def parse_capacity(value: int | str | None) -> int | None:
    """Bytes from an int or a size such as ``"2GiB"``/``"512MB"``; ``None`` means no limit."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"memory capacity {value!r} is not a size: give bytes or e.g. '2GiB'")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"memory capacity {value} must be a positive number of bytes")
        return value
    match = _SIZE.match(str(value))
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(
            f"memory capacity {value!r} is not a size: give bytes (e.g. 1073741824) or a number "
            "with a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
        )
    size = int(float(match.group(1)) * _UNITS[unit])
    if size <= 0:
        raise ValueError(f"memory capacity {value!r} must be more than 0 bytes")
    return size


class EmulatedSpec(FrozenRecord):
    """One process's emulated devices: the type torch will call them, their count and capacity,
    and whether their memory is out of the host's reach outside the device's kernels."""

    _fields = ("device_type", "device_count", "memory_capacity", "strict_memory")
    device_type: str
    device_count: int
    memory_capacity: int | None
    strict_memory: bool

    def __init__(
        self,
        device_type: str = DEFAULT_DEVICE_TYPE,
        device_count: int = 2,
        memory_capacity: int | None = None,
        strict_memory: bool = False,
    ) -> None:
        self._set_fields(device_type, device_count, memory_capacity, strict_memory)
        if not isinstance(self.device_type, str) or not _TYPE.match(self.device_type):
            raise ValueError(
                f"device type {self.device_type!r} is not a valid name: use lower-case letters, "
                "digits and '_', starting with a letter (e.g. 'emu', 'npu')"
            )
        if self.device_type in _TORCH_TYPES:
            raise ValueError(
                f"device type {self.device_type!r} is torch's own: the emulated device takes "
                "PrivateUse1's place, so name it as a vendor would (e.g. 'emu', 'npu', 'mlu')"
            )
        count = self.device_count
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_DEVICES:
            raise ValueError(f"device count {count!r} must be an int from 1 to {MAX_DEVICES}")
        if self.memory_capacity is not None:
            parse_capacity(self.memory_capacity)
        if not isinstance(self.strict_memory, bool):
            raise ValueError(f"strict_memory {self.strict_memory!r} must be True or False")


def spec_from_environment() -> EmulatedSpec:
    """The spec in ``ANYACCEL_EMULATED`` (``emu:2`` when unset).

    Raises ``InvalidSettingError`` naming the variable, its value, which part is wrong and why,
    and the format.
    """
    raw = os.environ.get(EMULATED_ENV, "").strip()
    if not raw:
        return EmulatedSpec()
    try:
        return _parse_setting(raw)
    except ValueError as exc:
        raise InvalidSettingError(
            f"{EMULATED_ENV}={raw!r} is not valid: {exc}; the format is {_FORMAT}"
        ) from exc


def parse_spec(text: str) -> EmulatedSpec:
    """``<type>:<count>[:<capacity>]`` (``ANYACCEL_EMULATED``'s format) as a spec.

    Raises ``ValueError`` naming the part that is wrong.
    """
    return _parse_setting(text.strip())


def _parse_setting(raw: str) -> EmulatedSpec:
    """``<type>:<count>[:<capacity>][:strict_memory]`` as a spec; ``ValueError`` names the part
    that is wrong."""
    parts = [part.strip() for part in raw.split(":")]
    strict = len(parts) > 2 and parts[-1].lower() == STRICT_MEMORY_FLAG
    if strict:
        parts = parts[:-1]
    if len(parts) == 1:
        raise ValueError(f"it names the type {parts[0]!r} but no count (add ':<count>')")
    if len(parts) > 3:
        raise ValueError(
            f"it has {len(parts)} ':'-separated parts, at most 3 are read (and a last "
            f"{STRICT_MEMORY_FLAG!r})"
        )
    device_type, count_text = parts[0], parts[1]
    if not count_text.isdigit():
        raise ValueError(
            f"the count (second part) {count_text!r} is not a whole number of devices, "
            f"1 to {MAX_DEVICES}"
        )
    capacity = parse_capacity(parts[2]) if len(parts) == 3 else None
    return EmulatedSpec(device_type, int(count_text), capacity, strict)


def visible_devices_env(device_type: str) -> str:
    """``<TYPE>_VISIBLE_DEVICES``: the variable an emulated type that stands in for no vendor
    reads (``EMU_VISIBLE_DEVICES``); a vendor's type reads the vendor's (its accelerator says)."""
    return f"{device_type.upper()}_VISIBLE_DEVICES"


def visible_devices(variable: str, device_count: int) -> tuple[int, ...]:
    """The devices (of ``0 .. device_count-1``) that ``variable`` shows, in its order; all of
    them when it is unset. They become devices ``0 .. len-1``, as a vendor runtime renumbers them.

    Raises ``InvalidSettingError`` naming the variable and its value for an entry that is not a
    device index, one past the count, a repeated one, or a value that shows no device.
    """
    raw = os.environ.get(variable)
    if raw is None:
        return tuple(range(device_count))
    form = f"comma-separated device indices from 0 to {device_count - 1}, e.g. '0,1'"
    entries = [entry.strip() for entry in raw.split(",")]
    if entries == [""]:
        raise InvalidSettingError(
            f"{variable}={raw!r} shows no device: list the devices this process may use "
            f"({form}), or unset {variable} to use all {device_count}"
        )
    shown: list[int] = []
    for entry in entries:
        if not entry.isdigit():
            raise InvalidSettingError(
                f"{variable}={raw!r} is not valid: {entry!r} is not a device index; give {form}"
            )
        index = int(entry)
        if index >= device_count:
            raise InvalidSettingError(
                f"{variable}={raw!r} is not valid: device {index} does not exist (this process "
                f"emulates {device_count} devices, set by {EMULATED_ENV} or install()); give {form}"
            )
        if index in shown:
            raise InvalidSettingError(
                f"{variable}={raw!r} is not valid: device {index} is listed twice; list each once"
            )
        shown.append(index)
    return tuple(shown)
