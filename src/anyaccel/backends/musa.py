"""musa: Moore Threads GPUs through torch_musa.

Runtime: ``torch_musa`` (from Moore Threads, not PyPI), which attaches ``torch.musa``.
Collectives: ``mccl``. Visible devices: ``MUSA_VISIBLE_DEVICES``. Exported to other nodes:
``MUSA_HOME``, ``MCCL*``, ``LD_LIBRARY*``, ``PATH``. Graphs: ``torch.musa.MUSAGraph``
(captured with ``torch.musa.graph``). Probed just before cuda: CUDA-compatibility layers for
MUSA can make ``torch.cuda`` report devices that are really Moore Threads GPUs.
"""

from __future__ import annotations

from anyaccel.backends.runtime_probe import RuntimeCheck, probe_runtime_of
from anyaccel.backends.torch_module import TorchModuleAccelerator
from anyaccel.probe import ProbeOutcome

#: How users check the runtime when it fails (the vendor's own status tool).
RUNTIME_CHECK = RuntimeCheck(
    "`mthreads-gmi` lists the GPUs", "the Moore Threads driver and MUSA toolkit"
)

__all__ = ["MusaAccelerator", "probe"]


def probe() -> ProbeOutcome:
    """Import torch_musa (only if installed) and count Moore Threads GPUs."""
    return probe_runtime_of(
        MusaAccelerator,
        vendor="Moore Threads MUSA",
        install_hint="Install the MUSA toolkit and the {package} wheel matching torch.",
        check=RUNTIME_CHECK,
    )


class MusaAccelerator(TorchModuleAccelerator):
    """Moore Threads GPUs through ``torch.musa``."""

    _name = "musa"
    _communication_backend_name = "mccl"
    _compile_backend = "inductor"
    device_module_name = "musa"
    runtime_package = "torch_musa"
    graph_class_name = "MUSAGraph"
    profiler_module_name = None
    visible_devices_env_names = ("MUSA_VISIBLE_DEVICES",)
    export_env_prefixes = ("MUSA_HOME", "MCCL", "LD_LIBRARY", "PATH")
