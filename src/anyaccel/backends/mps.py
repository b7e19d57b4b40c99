"""mps: Apple silicon GPUs through Metal Performance Shaders.

Runtime: a macOS build of torch (``torch.mps`` and ``torch.backends.mps``). One device,
``mps:0``; work runs in order on one command queue, so host timers are exact after a
``synchronize()``. No collectives of its own: ``gloo`` (tensors staged through the CPU).
No float64 on Metal; bfloat16 from macOS 14. Memory comes from ``torch.mps``
(``current_allocated_memory``, ``driver_allocated_memory``, ``recommended_max_memory``);
torch keeps no peaks, so the peaks here are the highest values anyaccel has read.
Pinning is a no-op: host and GPU share unified memory.
"""

from __future__ import annotations

from typing import Any

import torch

from anyaccel.backends.torch_module import TorchModuleAccelerator
from anyaccel.probe import ProbeOutcome

__all__ = ["MpsAccelerator", "probe"]


def probe() -> ProbeOutcome:
    """Ask ``torch.backends.mps`` whether this build and this Mac can run Metal."""
    absent = MpsAccelerator.runtime_absent()
    if absent is not None:
        return ProbeOutcome.not_installed(
            absent, "Run on Apple silicon with the macOS build of torch (pip install torch)."
        )
    if not torch.backends.mps.is_available():
        return ProbeOutcome.no_device(
            "torch has MPS but this Mac cannot run it (macOS 12.3+ and a Metal GPU needed)",
            "Upgrade macOS to 12.3 or later on a Mac with Apple silicon or a Metal GPU.",
        )
    return ProbeOutcome.found("one Apple GPU through MPS", 1)


class MpsAccelerator(TorchModuleAccelerator):
    """Apple GPUs through ``torch.mps``."""

    _name = "mps"
    _communication_backend_name = "gloo"
    _compile_backend = "inductor"
    device_module_name = "mps"
    profiler_module_name = None
    visible_devices_env_names = ("CUDA_VISIBLE_DEVICES",)
    export_env_prefixes = ()

    @classmethod
    def runtime_absent(cls) -> str | None:
        """A torch built without MPS (every build but macOS's): torch's own flag."""
        if torch.backends.mps.is_built():
            return None
        return f"torch {torch.__version__} was built without MPS (only macOS builds have it)"

    #: Peaks since the last reset (torch.mps keeps none); instance values once first raised.
    _peak_allocated = 0
    _peak_reserved = 0

    def __init__(self, device_module: Any | None = None) -> None:
        super().__init__(device_module)
        self._peak_allocated = 0
        self._peak_reserved = 0

    # ------------------------------------------------------------------ execution model
    def is_synchronized_device(self) -> bool:
        """One in-order queue: dependent work needs no explicit stream syncs."""
        return True

    # ------------------------------------------------------------------ device
    def _check_index(self, device_index: int | None) -> None:
        if device_index not in (None, 0):
            raise ValueError(f"MPS has one device, 0; device index {device_index} does not exist")

    def device(self, device_index: int | None = None) -> torch.device:
        """``torch.device('mps', 0)``: there is one device."""
        self._check_index(device_index)
        return torch.device("mps", 0)

    def set_device(self, device_index: int) -> None:
        """Only device 0 exists, so only 0 is accepted."""
        self._check_index(device_index)

    def current_device(self) -> int:
        """Always 0."""
        return 0

    def current_device_name(self) -> str:
        """Always ``'mps:0'``."""
        return "mps:0"

    def device_count(self) -> int:
        """1 when MPS is usable, else 0."""
        return 1 if self.is_available() else 0

    def synchronize(self, device_index: int | None = None) -> None:
        """Wait for the GPU's queue (``torch.mps.synchronize()`` takes no device)."""
        self._check_index(device_index)
        self._module.synchronize()

    def is_available(self) -> bool:
        """Whether this build and this Mac can run MPS."""
        return bool(torch.backends.mps.is_available())

    # ------------------------------------------------------------------ RNG
    def _generator(self) -> torch.Generator | None:
        getter = self._optional("_get_default_mps_generator")
        return getter() if getter is not None else None

    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        """Restore the MPS generator's state."""
        self._check_index(device_index)
        self._module.set_rng_state(new_state)

    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        """The MPS generator's state."""
        self._check_index(device_index)
        state: torch.Tensor = self._module.get_rng_state()
        return state

    def manual_seed_all(self, seed: int) -> None:
        """Seed the one MPS generator."""
        self._module.manual_seed(seed)

    def initial_seed(self) -> int:
        """The seed the MPS generator started from."""
        generator = self._generator()
        return int(generator.initial_seed()) if generator is not None else torch.initial_seed()

    def default_generator(self, device_index: int) -> torch.Generator:
        """The MPS generator."""
        self._check_index(device_index)
        generator = self._generator()
        return generator if generator is not None else super().default_generator(device_index)

    # ------------------------------------------------------------------ streams
    def current_stream(self, device_index: int | None = None) -> Any:
        """The MPS stream where torch exposes one, else an in-order host stream."""
        self._check_index(device_index)
        function = self._optional("current_stream")
        return function() if function is not None else super().current_stream(None)

    def default_stream(self, device_index: int | None = None) -> Any:
        """The MPS default stream where torch exposes one, else an in-order host stream."""
        self._check_index(device_index)
        function = self._optional("default_stream")
        return function() if function is not None else super().default_stream(None)

    # ------------------------------------------------------------------ memory
    def memory_allocated(self, device_index: int | None = None) -> int:
        """Bytes held by live MPS tensors (``current_allocated_memory``)."""
        self._check_index(device_index)
        allocated = int(self._module.current_allocated_memory())
        self._peak_allocated = max(self._peak_allocated, allocated)
        return allocated

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        """The highest ``memory_allocated`` read since start or the last reset."""
        return max(self._peak_allocated, self.memory_allocated(device_index))

    def memory_reserved(self, device_index: int | None = None) -> int:
        """Bytes the Metal driver holds for this process (``driver_allocated_memory``)."""
        self._check_index(device_index)
        reserved = int(self._module.driver_allocated_memory())
        self._peak_reserved = max(self._peak_reserved, reserved)
        return reserved

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        """The highest ``memory_reserved`` read since start or the last reset."""
        return max(self._peak_reserved, self.memory_reserved(device_index))

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        """Restart the peaks from the current figures."""
        self._peak_allocated = 0
        self._peak_reserved = 0
        self.memory_allocated(device_index)
        self.memory_reserved(device_index)

    def reset_max_memory_allocated(self, device_index: int | None = None) -> None:
        """Restart the allocated peak."""
        self._peak_allocated = 0
        self.memory_allocated(device_index)

    def reset_max_memory_cached(self, device_index: int | None = None) -> None:
        """Restart the reserved peak."""
        self._peak_reserved = 0
        self.memory_reserved(device_index)

    def memory_stats(self, device_index: int | None = None) -> dict[str, Any]:
        """The ``torch.cuda.memory_stats``-style byte keys, from ``torch.mps``."""
        return dict(super(TorchModuleAccelerator, self).memory_stats(device_index))

    def total_memory(self, device_index: int | None = None) -> int:
        """Metal's recommended working-set size: what the GPU may use of unified memory."""
        self._check_index(device_index)
        return int(self._module.recommended_max_memory())

    def available_memory(self, device_index: int | None = None) -> int:
        """The working-set size less what the driver holds for this process."""
        return max(0, self.total_memory(device_index) - self.memory_reserved(device_index))

    # ------------------------------------------------------------------ data types
    def is_bf16_supported(self) -> bool:
        """bfloat16 from macOS 14."""
        newer = getattr(torch.backends.mps, "is_macos_or_newer", None)
        return bool(newer(14, 0)) if newer is not None else False

    def is_fp64_supported(self) -> bool:
        """Metal has no float64."""
        return False

    # ------------------------------------------------------------------ pinning
    def _can_pin(self) -> bool:
        """Unified memory needs no page-locking (and torch refuses it under MPS)."""
        return False
