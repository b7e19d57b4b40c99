"""mlu: Cambricon MLUs through torch_mlu (which needs Cambricon Neuware).

Runtime: ``torch_mlu`` (from Cambricon, not PyPI), which attaches ``torch.mlu``.
Collectives: ``cncl``. Visible devices: ``MLU_VISIBLE_DEVICES``. Exported to other nodes:
``NEUWARE_HOME``, ``CNCL*``, ``LD_LIBRARY*``, ``PATH``. Graphs: ``torch.mlu.MLUGraph``.
Profiler ranges: ``torch.mlu.cnpx``. Triton: Cambricon's Triton backend, when installed.
"""

from __future__ import annotations

from anyaccel.backends.runtime_probe import RuntimeCheck, probe_runtime_of
from anyaccel.backends.torch_module import TorchModuleAccelerator
from anyaccel.probe import ProbeOutcome, package_installed

#: How users check the runtime when it fails (the vendor's own status tool).
RUNTIME_CHECK = RuntimeCheck(
    "`cnmon` lists the MLUs", "the Cambricon driver and Neuware (CNToolkit)"
)

__all__ = ["MluAccelerator", "probe"]


def probe() -> ProbeOutcome:
    """Import torch_mlu (only if installed) and count MLUs."""
    return probe_runtime_of(
        MluAccelerator,
        vendor="Cambricon MLU",
        install_hint="Install Cambricon Neuware and the {package} wheel matching torch.",
        check=RUNTIME_CHECK,
    )


class MluAccelerator(TorchModuleAccelerator):
    """Cambricon MLUs through ``torch.mlu``."""

    _name = "mlu"
    _communication_backend_name = "cncl"
    _compile_backend = "inductor"
    device_module_name = "mlu"
    runtime_package = "torch_mlu"
    graph_class_name = "MLUGraph"
    profiler_module_name = "cnpx"
    visible_devices_env_names = ("MLU_VISIBLE_DEVICES",)
    export_env_prefixes = ("NEUWARE_HOME", "CNCL", "LD_LIBRARY", "PATH")

    def is_triton_supported(self) -> bool:
        """Triton is installed and an MLU is visible (Cambricon ships a Triton backend)."""
        return package_installed("triton") and self.is_available()
