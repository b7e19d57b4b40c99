"""supa: Biren GPUs through torch_supa.

Runtime: ``torch_supa`` (from Biren), which attaches ``torch.supa`` and also answers as
``torch.cuda`` for CUDA code; detection therefore probes supa before cuda. Collectives:
``bccl`` (``gloo`` on Windows). Visible devices: ``SUPA_VISIBLE_DEVICES``. Exported to other
nodes: ``BCCL*``, ``BIREN*``, ``SUPA*``, ``LD_LIBRARY*``, ``PATH``. Graphs:
``torch.supa.SUPAGraph``. Triton: Biren's backend, when installed.
"""

from __future__ import annotations

import sys

from anyaccel.abstract import InstanceDefault
from anyaccel.backends.runtime_probe import RuntimeCheck, probe_runtime_of
from anyaccel.backends.torch_module import TorchModuleAccelerator
from anyaccel.probe import ProbeOutcome, package_installed

#: How users check the runtime when it fails (the vendor's own status tool).
RUNTIME_CHECK = RuntimeCheck("Biren's BR-SMI tool lists the GPUs", "the BIRENSUPA driver and SDK")

__all__ = ["SupaAccelerator", "probe"]


def probe() -> ProbeOutcome:
    """Import torch_supa (only if installed) and count Biren GPUs through ``torch.supa``."""
    return probe_runtime_of(
        SupaAccelerator,
        vendor="Biren SUPA",
        install_hint="Install Biren's BIRENSUPA driver and the {package} wheel matching torch.",
        check=RUNTIME_CHECK,
    )


class SupaAccelerator(TorchModuleAccelerator):
    """Biren GPUs through ``torch.supa``."""

    _name = "supa"
    #: ``bccl``; ``gloo`` on Windows (a subclass's own value wins).
    _communication_backend_name: InstanceDefault[str] = InstanceDefault(
        lambda self: "gloo" if sys.platform == "win32" else "bccl"
    )
    _compile_backend = "inductor"
    device_module_name = "supa"
    runtime_package = "torch_supa"
    graph_class_name = "SUPAGraph"
    profiler_module_name = None
    visible_devices_env_names = ("SUPA_VISIBLE_DEVICES",)
    export_env_prefixes = ("BCCL", "BIREN", "SUPA", "LD_LIBRARY", "PATH")

    def is_triton_supported(self) -> bool:
        """Triton is installed and a Biren GPU is visible."""
        return package_installed("triton") and self.is_available()
