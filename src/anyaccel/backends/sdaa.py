"""sdaa: Tecorigin SDAA accelerators through torch_sdaa.

Runtime: ``torch_sdaa`` (from Tecorigin, not PyPI), which attaches ``torch.sdaa``.
Collectives: ``tccl``. Visible devices: ``SDAA_VISIBLE_DEVICES``. Exported to other nodes:
``NCCL*`` (tccl reads NCCL-style settings), ``LD_LIBRARY*``, ``PATH``. No graphs.
"""

from __future__ import annotations

from anyaccel.backends.runtime_probe import RuntimeCheck, probe_runtime_of
from anyaccel.backends.torch_module import TorchModuleAccelerator
from anyaccel.probe import ProbeOutcome

#: How users check the runtime when it fails (the vendor's own status tool).
RUNTIME_CHECK = RuntimeCheck(
    "`teco-smi` lists the SDAA devices", "the Tecorigin SDAA driver and runtime"
)

__all__ = ["SdaaAccelerator", "probe"]


def probe() -> ProbeOutcome:
    """Import torch_sdaa (only if installed) and count SDAA devices."""
    return probe_runtime_of(
        SdaaAccelerator,
        vendor="Tecorigin SDAA",
        install_hint="Install Tecorigin's SDAA driver, runtime and the {package} wheel.",
        check=RUNTIME_CHECK,
    )


class SdaaAccelerator(TorchModuleAccelerator):
    """Tecorigin SDAA devices through ``torch.sdaa``."""

    _name = "sdaa"
    _communication_backend_name = "tccl"
    _compile_backend = "inductor"
    device_module_name = "sdaa"
    runtime_package = "torch_sdaa"
    graph_class_name = None
    profiler_module_name = None
    visible_devices_env_names = ("SDAA_VISIBLE_DEVICES",)
    export_env_prefixes = ("NCCL", "LD_LIBRARY", "PATH")
