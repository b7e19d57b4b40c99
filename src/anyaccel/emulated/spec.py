"""What an emulated device is: its type name, how many, how much memory; read from arguments or
``ANYACCEL_EMULATED``."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from anyaccel.errors import InvalidSettingError
from anyaccel.settings import EMULATED_ENV

__all__ = [
    "DEFAULT_DEVICE_TYPE",
    "EMULATED_ENV",
    "EmulatedSpec",
    "parse_capacity",
    "parse_spec",
    "spec_from_environment",
]

#: The device type when none is named.
DEFAULT_DEVICE_TYPE = "emu"
#: The most devices one process may emulate: the native core's table size (its builder passes
#: it to the compiler, so this is its one definition).
MAX_DEVICES = 64

_FORMAT = "<type>:<count>[:<capacity>], e.g. 'emu:2' or 'npu:8:16GiB'"
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


@dataclass(frozen=True)
class EmulatedSpec:
    """One process's emulated devices: the type torch will call them, their count and capacity."""

    device_type: str = DEFAULT_DEVICE_TYPE
    device_count: int = 2
    memory_capacity: int | None = None

    def __post_init__(self) -> None:
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
    """``<type>:<count>[:<capacity>]`` as a spec; ``ValueError`` names the part that is wrong."""
    parts = [part.strip() for part in raw.split(":")]
    if len(parts) == 1:
        raise ValueError(f"it names the type {parts[0]!r} but no count (add ':<count>')")
    if len(parts) > 3:
        raise ValueError(f"it has {len(parts)} ':'-separated parts, at most 3 are read")
    device_type, count_text = parts[0], parts[1]
    if not count_text.isdigit():
        raise ValueError(
            f"the count (second part) {count_text!r} is not a whole number of devices, "
            f"1 to {MAX_DEVICES}"
        )
    capacity = parse_capacity(parts[2]) if len(parts) == 3 else None
    return EmulatedSpec(device_type, int(count_text), capacity)
