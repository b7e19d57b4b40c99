"""A simulated vendor's device module over the emulated device: the vendor's API, real tensors.

``simulate_npu(emulated=True)`` (and mlu, sdaa, musa, supa) installs anyaccel's emulated device
under the vendor's device type, then attaches a vendor device module whose device state (count,
current device, memory, generators, streams, events, autocast dtypes) is the emulated device's,
while what only the vendor's runtime has (graph classes, profiler ranges, host registration, the
device's name) stays simulated. ``torch.zeros(3, device="npu:0")`` then holds a real tensor, and
anyaccel's own vendor backend (``NpuAccelerator``) drives it, unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from anyaccel.testing.simulated.device_module import (
    SimulatedDeviceModule,
    SimulatedDeviceProperties,
)

__all__ = ["EmulatedBacking", "emulated_module", "install_backing"]


def install_backing(device_type: str, device_count: int) -> Any:
    """Install ``device_count`` emulated devices named ``device_type``; return their module.

    The devices, their generators and their collectives (under the vendor's backend name) are
    process-wide and stay after the simulation ends: torch names PrivateUse1 once per process.
    Raises ``EmulatedDeviceError`` when this process installed another type or count.
    """
    from anyaccel.emulated import torch_module
    from anyaccel.emulated.accelerator import install

    install(device_type=device_type, device_count=device_count)
    return torch_module


class EmulatedBacking(SimulatedDeviceModule):
    """A simulated vendor module whose device state is the emulated device's own.

    Calls are still recorded in ``calls``; ``allocate``/``free`` are refused, since real
    tensors account for the memory.
    """

    _backing: Any = None

    def _attach_backing(self, backing: Any) -> None:
        object.__setattr__(self, "_backing", backing)
        self.default_generators = backing.default_generators
        self.Stream = backing.Stream
        self.Event = backing.Event
        self._utils = backing._utils

    def __getattr__(self, name: str) -> Any:  # what the vendor sheet does not define
        backing = object.__getattribute__(self, "_backing")
        if backing is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(backing, name)

    # ------------------------------------------------------------ bookkeeping
    def allocate(self, num_bytes: int, device: Any = None) -> None:
        """Refused: on the emulated device, tensors account for the memory themselves."""
        raise TypeError(
            "allocate() simulates memory use; this simulation runs on the emulated device, "
            f"where creating tensors on {self.device_type!r} uses its memory for real"
        )

    free = allocate

    def _index(self, device: Any = None) -> int:
        return int(self._backing._index(device))

    # ------------------------------------------------------------ device
    def is_available(self) -> bool:
        return bool(self._backing.is_available())

    def device_count(self) -> int:
        return int(self._backing.device_count())

    def current_device(self) -> int:
        return int(self._backing.current_device())

    def set_device(self, device: Any) -> None:
        self._backing.set_device(device)

    def synchronize(self, device: Any = None) -> None:
        self._backing.synchronize(device)

    def get_device_properties(self, device: Any = None) -> SimulatedDeviceProperties:
        index = self._index(device)
        major, minor = self._capability
        total = int(self._backing.get_device_properties(index).total_memory)
        return SimulatedDeviceProperties(self._device_name, total, major, minor)

    def get_amp_supported_dtype(self) -> list[torch.dtype]:
        return list(self._backing.get_amp_supported_dtype())

    def _is_in_bad_fork(self) -> bool:
        return bool(self._backing._is_in_bad_fork())

    # ------------------------------------------------------------ RNG
    def get_rng_state(self, device: Any = None) -> torch.Tensor:
        state: torch.Tensor = self._backing.get_rng_state(self._index(device))
        return state

    def set_rng_state(self, new_state: torch.Tensor, device: Any = None) -> None:
        self._backing.set_rng_state(new_state, self._index(device))

    def get_rng_state_all(self) -> list[torch.Tensor]:
        return list(self._backing.get_rng_state_all())

    def set_rng_state_all(self, new_states: Sequence[torch.Tensor]) -> None:
        self._backing.set_rng_state_all(new_states)

    def manual_seed(self, seed: int) -> None:
        self._backing.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        self._backing.manual_seed_all(seed)

    def seed(self) -> None:
        self._backing.seed()

    def seed_all(self) -> None:
        self._backing.seed_all()

    def initial_seed(self) -> int:
        return int(self._backing.initial_seed())

    # ------------------------------------------------------------ streams
    def current_stream(self, device: Any = None) -> Any:
        return self._backing.current_stream(device)

    def default_stream(self, device: Any = None) -> Any:
        return self._backing.default_stream(device)

    def set_stream(self, stream: Any) -> None:
        self._backing.set_stream(stream)

    def stream(self, stream: Any) -> Any:
        return self._backing.stream(stream)

    # ------------------------------------------------------------ memory
    def empty_cache(self) -> None:
        self._backing.empty_cache()

    def memory_allocated(self, device: Any = None) -> int:
        return int(self._backing.memory_allocated(device))

    def max_memory_allocated(self, device: Any = None) -> int:
        return int(self._backing.max_memory_allocated(device))

    def memory_reserved(self, device: Any = None) -> int:
        return int(self._backing.memory_reserved(device))

    def max_memory_reserved(self, device: Any = None) -> int:
        return int(self._backing.max_memory_reserved(device))

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self._backing.reset_peak_memory_stats(device)

    def reset_max_memory_allocated(self, device: Any = None) -> None:
        self._backing.reset_peak_memory_stats(device)

    def reset_max_memory_cached(self, device: Any = None) -> None:
        self._backing.reset_peak_memory_stats(device)

    def memory_stats(self, device: Any = None) -> Any:
        return self._backing.memory_stats(device)

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        free, total = self._backing.mem_get_info(device)
        return int(free), int(total)


_classes: dict[type[SimulatedDeviceModule], type[EmulatedBacking]] = {}


def emulated_module(
    sheet: type[SimulatedDeviceModule], device_count: int, /, *args: Any, **kwargs: Any
) -> SimulatedDeviceModule:
    """The vendor module ``sheet`` describes, over ``device_count`` emulated devices.

    ``kwargs`` are ``sheet``'s own (``device_type`` names the emulated type); the vendor's
    methods (``sheet``'s overrides) win over the emulated device's where both define one.
    """
    device_type = str(kwargs["device_type"])
    backing = install_backing(device_type, device_count)
    cls = _classes.get(sheet)
    if cls is None:
        bases = (EmulatedBacking,) if sheet is SimulatedDeviceModule else (sheet, EmulatedBacking)
        cls = _classes[sheet] = type(f"Emulated{sheet.__name__}", bases, {})
    module = cls(*args, device_count=device_count, **kwargs)
    EmulatedBacking._attach_backing(module, backing)  # by the class: no call is recorded
    return module
