"""npu: Huawei Ascend NPUs through torch_npu (which needs the Ascend CANN toolkit).

Runtime: ``torch_npu`` (PyPI ``torch-npu``, matching the torch version), which attaches
``torch.npu``. Collectives: ``hccl``. Visible devices: ``ASCEND_RT_VISIBLE_DEVICES``.
Exported to other nodes: ``ASCEND*``, ``HCCL*``, ``LD_LIBRARY*``, ``PATH``. Graphs:
``torch.npu.NPUGraph``. Profiler ranges: ``torch.npu.mstx.range_start``/``range_end`` (by id;
mstx keeps no stack). Host registration: ``torch.npu.npurt().npuHostRegister`` with 4 KiB-aligned
buffers.

torch_npu registers itself for torch's backend autoload: if it is installed without CANN,
``import torch`` itself fails unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` is set.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from anyaccel.backends.runtime_probe import RuntimeCheck, probe_runtime_of
from anyaccel.backends.torch_module import TorchModuleAccelerator
from anyaccel.probe import FORCE_ENV, ProbeOutcome
from anyaccel.settings import AUTOLOAD_ENV

#: How users check the runtime when it fails (the vendor's own status tool).
RUNTIME_CHECK = RuntimeCheck(
    "`npu-smi info` lists the NPUs", "the Ascend NPU driver and the CANN toolkit"
)

__all__ = ["NpuAccelerator", "probe"]

#: ``ACL_HOST_REGISTER_MAPPED``: map the registered host buffer into device address space.
_ACL_HOST_REGISTER_MAPPED = 0x2

_CANN_REMEDY = (
    "Install the Ascend CANN toolkit and run `source <CANN>/set_env.sh` (it puts libhccl.so "
    "and libascendcl.so on LD_LIBRARY_PATH), or uninstall torch-npu. Until then, "
    f"{AUTOLOAD_ENV}=0 keeps `import torch` working."
)


def _diagnose(text: str) -> tuple[str, str] | None:
    """Name the missing CANN library when torch_npu's import fails for want of one."""
    for library in ("libhccl.so", "libascendcl.so", "libascend_hal.so", "libacl_op_compiler.so"):
        if library in text:
            return f"Ascend CANN libraries not found ({library} is missing)", _CANN_REMEDY
    if "Two accelerators cannot be used at the same time" in text:
        return (
            f"{NpuAccelerator.runtime_package} refuses to run on this torch build, which has "
            "another accelerator",
            f"Install the CPU build of torch that matches torch-npu, or unset {FORCE_ENV} "
            "to use the other accelerator.",
        )
    return None


def probe() -> ProbeOutcome:
    """Import torch_npu (only if installed) and count NPUs through the driver, not a context."""
    return probe_runtime_of(
        NpuAccelerator,
        vendor="Ascend NPU",
        install_hint=(
            f"pip install torch-npu=={torch.__version__.split('+')[0]} "
            "(and install the Ascend CANN toolkit)."
        ),
        check=RUNTIME_CHECK,
        diagnose=_diagnose,
    )


#: Per thread: ids of the mstx ranges ``range_push`` opened, innermost last. mstx closes a
#: range by its id and keeps no stack, so ``range_pop`` needs this one.
_ranges = threading.local()


def _open_ranges() -> list[int]:
    """This thread's stack of open mstx range ids."""
    stack: list[int] | None = getattr(_ranges, "stack", None)
    if stack is None:
        stack = _ranges.stack = []
    return stack


class NpuAccelerator(TorchModuleAccelerator):
    """Ascend NPUs through ``torch.npu``."""

    _name = "npu"
    _communication_backend_name = "hccl"
    _compile_backend = "inductor"
    device_module_name = "npu"
    runtime_package = "torch_npu"
    graph_class_name = "NPUGraph"
    profiler_module_name = "mstx"
    visible_devices_env_names = ("ASCEND_RT_VISIBLE_DEVICES",)
    export_env_prefixes = ("ASCEND", "HCCL", "LD_LIBRARY", "PATH")
    host_registration = ("npurt", "npuHostRegister", "npuHostUnregister", _ACL_HOST_REGISTER_MAPPED)

    # ------------------------------------------------------------------ profiling
    def range_push(self, msg: str, domain: str | None = None, category: str | None = None) -> Any:
        """Open a range in Ascend's profiler (``torch.npu.mstx.range_start``); returns its id."""
        start = getattr(getattr(self._module, "mstx", None), "range_start", None)
        if start is None:
            return None
        range_id = start(msg)
        _open_ranges().append(range_id)
        return range_id

    def range_pop(self, domain: str | None = None) -> Any:
        """Close the innermost range this thread opened (``torch.npu.mstx.range_end``)."""
        ranges = _open_ranges()
        if not ranges:
            return None
        range_id = ranges.pop()
        end = getattr(getattr(self._module, "mstx", None), "range_end", None)
        if end is not None and range_id:  # 0: range_start refused it, nothing to close
            end(range_id)
        return range_id

    # ------------------------------------------------------------------ host memory
    def pin_memory_alignment(self) -> int:
        """Mapped host registration needs 4 KiB-aligned addresses."""
        return 4096
