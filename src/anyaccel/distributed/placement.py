"""Where a DDP script's processes and replicas go, right on every backend.

What ``anyaccel port`` writes where a CUDA script spelled these out: ``ddp_device_ids`` and
``ddp_output_device`` for ``DistributedDataParallel`` (a device on an accelerator, ``None`` on
the CPU, which DDP requires there), and ``local_process_count`` for the number of processes
a script starts on a node (``world_size = torch.cuda.device_count()`` feeding ``mp.spawn``),
which is never 0.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, TypeVar

from anyaccel.distributed.environment import is_launched, launch_info
from anyaccel.distributed.errors import DistributedSetupError
from anyaccel.distributed.exit_grace import install_exit_grace

if TYPE_CHECKING:
    from anyaccel.abstract import Accelerator

__all__ = [
    "CPU_PROCESSES_ENV",
    "ddp_device_ids",
    "ddp_output_device",
    "local_process_count",
]

#: How many processes a script that starts one per device starts on a CPU-only host.
CPU_PROCESSES_ENV = "ANYACCEL_CPU_PROCESSES"

_POSITIVE = re.compile(r"[1-9][0-9]*")

_Device = TypeVar("_Device")


def _resolve(accelerator: Accelerator | None) -> Accelerator:
    if accelerator is None:
        from anyaccel.detection import get_accelerator

        return get_accelerator()
    return accelerator


def _has_devices(accelerator: Accelerator) -> bool:
    """Whether modules live on a device of their own (not the CPU, and at least one device)."""
    return accelerator.device_name() != "cpu" and accelerator.device_count() > 0


def _checked_index(index: _Device, argument: str) -> _Device:
    """``index`` if it can name a device; ``TypeError``/``ValueError`` naming it otherwise."""
    if isinstance(index, bool) or index is None:
        raise TypeError(
            f"{argument} takes a device index (an int such as LOCAL_RANK) or a device, "
            f"not {index!r}"
        )
    if isinstance(index, int) and index < 0:
        raise ValueError(f"{argument} takes a device index >= 0, not {index}")
    return index


def ddp_device_ids(index: _Device, accelerator: Accelerator | None = None) -> list[_Device] | None:
    """``device_ids`` for ``DistributedDataParallel``: ``[index]`` on an accelerator, else ``None``.

    DDP refuses ``device_ids`` for a module on the CPU; on an accelerator with devices it is
    the one device this process trains on. ``index`` is what the script passed (an int, a
    ``torch.device`` or a device string); ``accelerator`` defaults to ``get_accelerator()``.
    Raises ``TypeError`` for ``None``/bools and ``ValueError`` for a negative index.
    """
    index = _checked_index(index, "ddp_device_ids")
    if _has_devices(_resolve(accelerator)):
        return [index]
    install_exit_grace()  # DDP on the CPU runs on gloo: see anyaccel.distributed.exit_grace
    return None


def ddp_output_device(index: _Device, accelerator: Accelerator | None = None) -> _Device | None:
    """``output_device`` for DDP: ``index`` on an accelerator, else ``None``.

    The counterpart of ``ddp_device_ids``; same arguments, same errors.
    """
    index = _checked_index(index, "ddp_output_device")
    if _has_devices(_resolve(accelerator)):
        return index
    install_exit_grace()
    return None


def local_process_count(accelerator: Accelerator | None = None) -> int:
    """How many processes to run on this node, one per device; never 0.

    On an accelerator with devices: its device count (what ``torch.cuda.device_count()``
    gave the script). On the CPU: the launcher's local world size when a launcher (torchrun,
    mpirun, srun) started this process, else ``ANYACCEL_CPU_PROCESSES`` (for scripts that
    spawn their own processes, such as ``mp.spawn``), else 1.

    Raises ``DistributedSetupError`` when ``ANYACCEL_CPU_PROCESSES`` is not a positive
    integer or a launcher's variables are malformed.
    """
    accelerator = _resolve(accelerator)
    if accelerator.device_name() != "cpu":
        count = accelerator.device_count()
        if count > 0:
            return count
    if is_launched():
        return max(launch_info().local_world_size, 1)
    value = os.environ.get(CPU_PROCESSES_ENV)
    if value is None:
        return 1
    if _POSITIVE.fullmatch(value.strip()) is None:
        raise DistributedSetupError(
            f"{CPU_PROCESSES_ENV}={value!r} is not a positive integer; set it to the number "
            "of processes to start on this CPU host (for example 2), or unset it for 1"
        )
    return int(value.strip())
