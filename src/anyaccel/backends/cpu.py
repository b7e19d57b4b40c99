"""cpu: the host processor, and the fallback when no accelerator is found.

Runtime: torch itself. Collectives: ``ccl`` when ``oneccl_bindings_for_pytorch`` imports,
else ``anyaccel_shm`` (shared memory on one node, gloo inside for the rest; registered with
``torch.distributed`` when asked) unless ``ANYACCEL_SHM_BACKEND=0``, the ranks span nodes or
the platform lacks it, then ``gloo``. Device strings are always ``'cpu'``: an index is a
local rank, not a device.
The device count is ``LOCAL_SIZE`` or the number of NUMA nodes, read once. Memory figures
are the process's resident set and the operating system's (cgroup-limited) memory.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import re
from pathlib import Path
from typing import Any

import torch

from anyaccel.abstract import Accelerator, InstanceDefault
from anyaccel.probe import ProbeOutcome, package_installed

__all__ = ["CpuAccelerator", "DefaultGloo", "numa_node_count", "probe"]

_NODE_DIR = Path("/sys/devices/system/node")
#: Decides gloo or anyaccel_shm and registers the latter: named, not imported, because a
#: backend never imports ``anyaccel.distributed`` (docs/architecture.md); resolved only here.
CPU_COLLECTIVES = "anyaccel.distributed.shm.backend:cpu_backend_name"


def probe() -> ProbeOutcome:
    """The CPU is always there."""
    return ProbeOutcome.found("the host CPU is always available", 1)


def numa_node_count(node_dir: Path = _NODE_DIR) -> int:
    """NUMA nodes the OS reports (1 where it reports none)."""
    try:
        nodes = [p for p in node_dir.iterdir() if re.fullmatch(r"node\d+", p.name)]
    except OSError:
        return 1
    return max(1, len(nodes))


def _local_size() -> int | None:
    value = os.environ.get("LOCAL_SIZE")
    if value is None or not value.strip():
        return None
    try:
        size = int(value)
    except ValueError:
        raise ValueError(
            f"LOCAL_SIZE={value!r} is not an integer; the launcher should set it to the "
            "number of processes on this node"
        ) from None
    if size < 1:
        raise ValueError(f"LOCAL_SIZE={value!r} must be at least 1")
    return size


def ccl_backend_available() -> bool:
    """Whether oneCCL bindings import, which registers the ``ccl`` collective backend."""
    if not package_installed("oneccl_bindings_for_pytorch"):
        return False
    try:
        import oneccl_bindings_for_pytorch  # type: ignore[import-not-found]  # noqa: F401
    except Exception:
        return False
    return True


def _cgroup_memory_limit() -> int | None:
    """The memory limit of this process's cgroup in bytes, if it has one."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:
            return int(text)
    return None


class DefaultGloo(str):
    """``"gloo"`` as :class:`CpuAccelerator`'s own default, told apart from a subclass's "gloo".

    Only this value is replaced by the fast backend's decision; it equals ``"gloo"`` and
    pickles as itself (an accelerator sent to a spawned rank keeps it).
    """

    __slots__ = ()


class CpuAccelerator(Accelerator):
    """The host CPU as an accelerator: synchronous, one memory, ranks as device indices."""

    _name = "cpu"
    _compile_backend = "inductor"
    visible_devices_env_names = ("CUDA_VISIBLE_DEVICES",)
    export_env_prefixes = ()

    #: ``ccl`` where oneCCL's bindings import, else ``gloo`` (a subclass's own value wins);
    #: ``communication_backend_name()`` answers ``anyaccel_shm`` for this ``gloo`` where it
    #: applies.
    _communication_backend_name: InstanceDefault[str] = InstanceDefault(
        lambda self: "ccl" if ccl_backend_available() else DefaultGloo("gloo")
    )
    #: ``LOCAL_SIZE`` or the NUMA node count, read once (after construction without ``__init__``).
    _device_count: InstanceDefault[int] = InstanceDefault(
        lambda self: _local_size() or numa_node_count()
    )
    #: Peak resident set size seen, where the OS keeps no high-water mark.
    _peak_rss_fallback = 0

    def __init__(self) -> None:
        size = _local_size()  # a bad LOCAL_SIZE is an error when the accelerator is made
        self._device_count = size if size is not None else numa_node_count()
        self._peak_rss_fallback = 0

    # ------------------------------------------------------------------ execution model
    def is_synchronized_device(self) -> bool:
        """The CPU finishes each op before the call returns."""
        return True

    # ------------------------------------------------------------------ device
    def device_name(self, device_index: int | None = None) -> str:
        """Always ``'cpu'``: torch has one CPU device whatever the rank."""
        return "cpu"

    def device(self, device_index: int | None = None) -> torch.device:
        """``torch.device('cpu')``."""
        return torch.device("cpu")

    def set_device(self, device_index: int) -> None:
        """Nothing to select: every rank uses the one CPU device."""

    def current_device(self) -> int:
        """This process's local rank (``LOCAL_RANK``), which plays the device index."""
        value = os.environ.get("LOCAL_RANK", "0")
        try:
            return int(value)
        except ValueError:
            raise ValueError(
                f"LOCAL_RANK={value!r} is not an integer; the launcher should set it to this "
                "process's rank on the node"
            ) from None

    def current_device_name(self) -> str:
        """Always ``'cpu'``."""
        return "cpu"

    def device_count(self) -> int:
        """``LOCAL_SIZE`` if the launcher set it, else the number of NUMA nodes."""
        return self._device_count

    def synchronize(self, device_index: int | None = None) -> None:
        """Nothing is queued, so nothing to wait for."""

    def is_available(self) -> bool:
        """Always true."""
        return True

    def communication_backend_name(self) -> str:
        """``ccl`` with oneCCL; else ``anyaccel_shm`` (registered now) where it applies, or gloo.

        A subclass's own ``_communication_backend_name`` is answered as it is.

        Where it applies: ``ANYACCEL_SHM_BACKEND`` not 0, a Linux ``memfd_create``, ranks on
        one node (the launcher's variables) and a torch that registers backends; raises
        ``InvalidSettingError`` naming a bad ``ANYACCEL_SHM_BACKEND``.
        """
        native = self._communication_backend_name
        if type(native) is not DefaultGloo:  # ccl, or a subclass's own value
            return native
        module, _, attribute = CPU_COLLECTIVES.partition(":")
        name: str = getattr(importlib.import_module(module), attribute)()
        return name

    # ------------------------------------------------------------------ RNG
    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        """Restore torch's CPU generator."""
        torch.set_rng_state(new_state)

    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        """torch's CPU generator state."""
        return torch.get_rng_state()

    def manual_seed(self, seed: int) -> None:
        """Seed torch's CPU generator."""
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        """Seed torch's CPU generator (there is only one)."""
        torch.manual_seed(seed)

    def initial_seed(self) -> int:
        """The seed torch's CPU generator started from."""
        return torch.initial_seed()

    def default_generator(self, device_index: int) -> torch.Generator:
        """torch's CPU generator."""
        return torch.default_generator

    # ------------------------------------------------------------------ memory
    def empty_cache(self) -> None:
        """Give freed heap pages back to the OS (glibc ``malloc_trim``) where possible."""
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)

    @staticmethod
    def _status_kib(field: str) -> int | None:
        try:
            status = Path("/proc/self/status").read_text()
        except OSError:
            return None
        match = re.search(rf"^{field}:\s+(\d+)\s+kB", status, re.MULTILINE)
        return int(match.group(1)) * 1024 if match else None

    def memory_allocated(self, device_index: int | None = None) -> int:
        """The process's resident set size in bytes: the interpreter and torch, not only tensors."""
        import psutil

        rss = int(psutil.Process().memory_info().rss)
        self._peak_rss_fallback = max(self._peak_rss_fallback, rss)
        return rss

    def memory_measure(self) -> str:
        """``'process resident memory'``: the CPU cannot tell tensor bytes from the rest."""
        return "process resident memory"

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        """Peak resident set size since start or the last reset."""
        current = self.memory_allocated(device_index)
        peak = self._status_kib("VmHWM")
        if peak is None:
            peak = self._peak_rss_fallback
        return max(peak, current)

    def get_rss(self) -> int:
        """The process's resident set size in bytes (DeepSpeed's CPU name; feeds the peak)."""
        return self.memory_allocated()

    def reset_rss(self) -> int:
        """Restart the peak resident set size; returns the current one, as DeepSpeed's does."""
        self.reset_peak_memory_stats()
        return self.memory_allocated()

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        """Restart the peak resident set size (Linux ``/proc/self/clear_refs``)."""
        with contextlib.suppress(OSError):
            Path("/proc/self/clear_refs").write_text("5")
        self._peak_rss_fallback = 0

    def memory_stats(self, device_index: int | None = None) -> dict[str, Any]:
        """Process and system memory figures, under ``torch.cuda.memory_stats``-style keys."""
        import psutil

        stats = super().memory_stats(device_index)
        system = psutil.virtual_memory()
        stats.update(
            {
                "system.total": self.total_memory(),
                "system.available": self.available_memory(),
                "system.used": int(system.used),
                "system.percent": float(system.percent),
            }
        )
        return stats

    def total_memory(self, device_index: int | None = None) -> int:
        """Physical memory in bytes, or the cgroup limit if lower."""
        import psutil

        total = int(psutil.virtual_memory().total)
        limit = _cgroup_memory_limit()
        return min(total, limit) if limit is not None else total

    def available_memory(self, device_index: int | None = None) -> int:
        """Memory the OS can still give out, bounded by the cgroup limit."""
        import psutil

        available = int(psutil.virtual_memory().available)
        limit = _cgroup_memory_limit()
        if limit is None:
            return available
        return max(0, min(available, limit - int(psutil.Process().memory_info().rss)))

    # ------------------------------------------------------------------ data types
    def is_bf16_supported(self) -> bool:
        """bfloat16 runs on every CPU torch supports (natively with AVX512-BF16/AMX)."""
        return True

    def is_fp16_supported(self) -> bool:
        """float16 compute where oneDNN has fast kernels for this CPU (AVX512-FP16, AMX)."""
        try:
            return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
        except (AttributeError, RuntimeError):
            return False

    def supported_dtypes(self) -> list[torch.dtype]:
        """float32, bfloat16, and float16 where the CPU has fast kernels."""
        dtypes = [torch.float32, torch.bfloat16]
        if self.is_fp16_supported():
            dtypes.append(torch.float16)
        return dtypes

    # ------------------------------------------------------------------ pinning & placement
    def _can_pin(self) -> bool:
        """With no device to copy to, pinning buys nothing: tensors are returned as they are."""
        return False

    def on_accelerator(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is a CPU tensor."""
        return bool(tensor.device.type == "cpu")

    # ------------------------------------------------------------------ op building
    def create_op_builder(self, op_name: str) -> Any | None:
        """An instance of the op builder called ``op_name`` (DeepSpeed's CPU parameter name)."""
        return super().create_op_builder(op_name)
