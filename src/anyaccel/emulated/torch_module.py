"""``torch.<type>`` for the emulated device: ``torch.cuda``'s API over the native core.

Registered with ``torch._register_device_module`` by ``install``; every function reads the
native core, so the figures are the device's own (memory per device, generators, streams).
The installed spec is ``state``'s (its one holder); this module keeps only the generators.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from anyaccel.emulated.state import installed_spec, native

__all__ = [
    "Event",
    "Stream",
    "StreamContext",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_name",
    "get_device_properties",
    "get_rng_state",
    "get_rng_state_all",
    "init",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
]

Stream = torch.Stream
Event = torch.Event

#: Each device's default generator, in index order (set by ``attach``).
default_generators: tuple[torch.Generator, ...] = ()


def _native() -> Any:
    return native()


def attach() -> None:
    """Take each device's default generator from the native core (called once by ``install``)."""
    global default_generators
    count = int(_native().device_count())
    default_generators = tuple(_native().default_generator(i) for i in range(count))


def _type() -> str:
    return torch._C._get_privateuse1_backend_name()


def _index(device: torch.device | str | int | None = None, optional: bool = True) -> int:
    """A device index from an index, a name or a ``torch.device`` (``None``: the current one)."""
    if device is None:
        return int(_native().current_device())
    if isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        resolved = torch.device(device)
        if resolved.type != _type():
            raise ValueError(f"Expected a {_type()} device, but got: {device!r}")
        if resolved.index is None:
            return int(_native().current_device())
        index = resolved.index
    if not 0 <= index < device_count():
        raise ValueError(
            f"Invalid device index {index} for {_type()}: this process has {device_count()} "
            f"emulated devices (valid: 0..{device_count() - 1})"
        )
    return index


class _Utils:
    """``torch.<type>._utils``: what ``torch.load``'s device check reads."""

    @staticmethod
    def _get_device_index(device: Any, optional: bool = False, allow_cpu: bool = False) -> int:
        return _index(device, optional)


_utils = _Utils()


# ------------------------------------------------------------------------------- devices
def is_available() -> bool:
    """Whether the emulated devices exist (true once installed)."""
    return installed_spec() is not None


def is_initialized() -> bool:
    """Whether the device runtime is initialised (it is, once installed)."""
    return installed_spec() is not None


def _lazy_init() -> None:
    """Nothing to initialise lazily: ``install`` did it."""


def init() -> None:
    """Initialise the device state, as ``torch.cuda.init()``: ``install`` did, so this only
    checks that it was (idempotent; ``EmulatedDeviceError`` before ``install``)."""
    _native()
    _lazy_init()


def device_count() -> int:
    """How many emulated devices this process has."""
    return int(_native().device_count())


def current_device() -> int:
    """The calling thread's current device index."""
    return int(_native().current_device())


def set_device(device: torch.device | str | int) -> None:
    """Make ``device`` the calling thread's current device."""
    _native().set_device(_index(device))


class device:
    """A context that makes ``device`` current and restores the previous device on exit."""

    def __init__(self, device: torch.device | str | int | None) -> None:
        self.index = -1 if device is None else _index(device)
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = current_device()
        if self.index >= 0:
            set_device(self.index)

    def __exit__(self, *exc: object) -> None:
        if self.index >= 0:
            set_device(self.previous)


def synchronize(device: torch.device | str | int | None = None) -> None:
    """Wait for the device's work: its queued copies into pinned host memory land."""
    _native().synchronize(_index(device))


def get_device_name(device: torch.device | str | int | None = None) -> str:
    """The device's name."""
    return f"anyaccel emulated {_type()} (host memory)"


@dataclass(frozen=True)
class DeviceProperties:
    """What ``get_device_properties`` reports, in ``torch.cuda``'s field names."""

    name: str
    total_memory: int
    multi_processor_count: int
    major: int = 0
    minor: int = 0
    type: str = "emulated"


def _host_memory() -> int:
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _total(index: int) -> int:
    capacity = int(_native().memory_counters(index)["capacity"])
    return capacity if capacity >= 0 else _host_memory()


def get_device_properties(device: torch.device | str | int | None = None) -> DeviceProperties:
    """The device's properties; ``total_memory`` is its capacity (the host's memory if none)."""
    index = _index(device)
    return DeviceProperties(get_device_name(index), _total(index), os.cpu_count() or 1)


def get_device_capability(device: torch.device | str | int | None = None) -> tuple[int, int]:
    """``(major, minor)`` as ``torch.cuda``'s, ``(0, 0)``: the device has no compute capability
    (code gated on a CUDA capability takes its portable path). ``ValueError`` for a bad index.

    The dtypes it supports are ``torch.accelerator.get_device_capability()``'s: all of the CPU's.
    """
    _index(device)
    return (0, 0)


# ------------------------------------------------------------------------------- memory
def memory_stats(device: torch.device | str | int | None = None) -> dict[str, int]:
    """The device's memory figures under ``torch.cuda.memory_stats``'s keys."""
    counters = _native().memory_counters(_index(device))
    allocated, peak = int(counters["allocated"]), int(counters["peak_allocated"])
    stats: dict[str, int] = {}
    for pool in ("all", "large_pool", "small_pool"):
        used = allocated if pool == "all" else 0
        top = peak if pool == "all" else 0
        for kind in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"):
            stats[f"{kind}.{pool}.current"] = used
            stats[f"{kind}.{pool}.peak"] = top
            stats[f"{kind}.{pool}.allocated"] = int(counters["alloc_count"]) if pool == "all" else 0
            stats[f"{kind}.{pool}.freed"] = int(counters["free_count"]) if pool == "all" else 0
    stats["allocation.all.current"] = int(counters["allocations"])
    stats["allocation.all.peak"] = int(counters["peak_allocations"])
    stats["allocation.all.allocated"] = int(counters["alloc_count"])
    stats["allocation.all.freed"] = int(counters["free_count"])
    stats["num_ooms"] = int(counters["oom_count"])
    stats["num_alloc_retries"] = 0
    return dict(sorted(stats.items()))


def memory_allocated(device: torch.device | str | int | None = None) -> int:
    """Bytes held by live tensors on the device."""
    return int(_native().memory_counters(_index(device))["allocated"])


def max_memory_allocated(device: torch.device | str | int | None = None) -> int:
    """Peak of ``memory_allocated`` since start or the last reset."""
    return int(_native().memory_counters(_index(device))["peak_allocated"])


def memory_reserved(device: torch.device | str | int | None = None) -> int:
    """Bytes reserved: equal to ``memory_allocated`` (no cache is kept)."""
    return memory_allocated(device)


def max_memory_reserved(device: torch.device | str | int | None = None) -> int:
    """Peak of ``memory_reserved``."""
    return max_memory_allocated(device)


def reset_peak_memory_stats(device: torch.device | str | int | None = None) -> None:
    """Restart the peaks from the current figures."""
    _native().reset_peak(_index(device))


reset_max_memory_allocated = reset_peak_memory_stats


def mem_get_info(device: torch.device | str | int | None = None) -> tuple[int, int]:
    """``(free, total)`` bytes of the device (its capacity, else the host's memory)."""
    index = _index(device)
    total = _total(index)
    return max(total - memory_allocated(index), 0), total


def empty_cache() -> None:
    """Nothing cached: freed memory returns to the host at once."""


# ------------------------------------------------------------------------------- RNG
def _generator(device: torch.device | str | int | None) -> torch.Generator:
    return default_generators[_index(device)]


def get_rng_state(device: torch.device | str | int = "privateuseone") -> torch.Tensor:
    """The device generator's state as a CPU ``ByteTensor``."""
    return _generator(None if device == "privateuseone" else device).get_state()


def get_rng_state_all() -> list[torch.Tensor]:
    """Every device generator's state."""
    return [generator.get_state() for generator in default_generators]


def set_rng_state(
    new_state: torch.Tensor, device: torch.device | str | int = "privateuseone"
) -> None:
    """Restore the device generator's state."""
    _generator(None if device == "privateuseone" else device).set_state(new_state)


def set_rng_state_all(new_states: Sequence[torch.Tensor]) -> None:
    """Restore every device generator's state, in index order."""
    for generator, state in zip(default_generators, new_states, strict=True):
        generator.set_state(state)


def manual_seed(seed: int) -> None:
    """Seed the current device's generator."""
    _generator(None).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every device's generator (``torch.manual_seed`` calls this)."""
    for generator in default_generators:
        generator.manual_seed(int(seed))


def seed() -> None:
    """Seed the current device's generator from a random number."""
    _generator(None).seed()


def seed_all() -> None:
    """Seed every device's generator from one random number."""
    random_seed = default_generators[0].seed()
    for generator in default_generators[1:]:
        generator.manual_seed(random_seed)


def initial_seed() -> int:
    """The seed the current device's generator started from."""
    return int(_generator(None).initial_seed())


# ------------------------------------------------------------------------------- streams
def _stream_of(index: int, stream_id: int) -> torch.Stream:
    return torch.Stream(stream_id=stream_id, device_index=index, device_type=_device_type_code())


def _device_type_code() -> int:
    probe = torch.Stream(device=torch.device(_type(), 0))
    return int(probe.device_type)


def current_stream(device: torch.device | str | int | None = None) -> torch.Stream:
    """The stream work is queued on now, for the device."""
    index = _index(device)
    return _stream_of(index, int(_native().current_stream_id(index)))


def default_stream(device: torch.device | str | int | None = None) -> torch.Stream:
    """The device's default stream."""
    return _stream_of(_index(device), 0)


def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` current on its device."""
    _native().set_current_stream(int(stream.device_index), int(stream.stream_id))


class StreamContext:
    """A context that makes ``stream`` current (and its device) and restores both on exit."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self.previous_stream: torch.Stream | None = None
        self.previous_device = -1

    def __enter__(self) -> torch.Stream | None:
        if self.stream is None:
            return None
        self.previous_device = current_device()
        self.previous_stream = current_stream(int(self.stream.device_index))
        set_device(int(self.stream.device_index))
        set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc: object) -> None:
        if self.stream is None or self.previous_stream is None:
            return
        set_stream(self.previous_stream)
        set_device(self.previous_device)


@contextmanager
def stream(stream: torch.Stream | None) -> Iterator[torch.Stream | None]:
    """A context that makes ``stream`` current, as ``torch.cuda.stream``."""
    with StreamContext(stream) as current:
        yield current


# ------------------------------------------------------------------------------- amp
def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes autocast may lower to on this device."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bfloat16 computes (on the host's kernels)."""
    return True


def _is_in_bad_fork() -> bool:
    """No device state breaks in a forked child (the memory is host memory)."""
    return False
