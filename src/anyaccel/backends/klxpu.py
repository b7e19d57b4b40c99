"""klxpu: Kunlunxin (Kunlun) XPUs through torch_xmlir, which answers as ``torch.cuda``.

Runtime: ``torch_xmlir`` (from Kunlunxin, not PyPI); once imported, ``torch.cuda`` drives the
XPUs and tensors report the device type ``cuda``, so device strings are ``cuda:N`` while the
backend's name (what ``DS_ACCELERATOR`` accepts) is ``klxpu``, as in DeepSpeed. Collectives:
``nccl``, which torch_xmlir serves with Kunlunxin's BKCL. Visible devices:
``CUDA_VISIBLE_DEVICES``. Exported to other nodes: ``BKCL*``, ``XPU*``, ``XMLIR*``,
``LD_LIBRARY*``, ``PATH``. Device event timers read 0 unless ``XPU_EVENT_KL3_ENABLE=1``, so host
timers are used otherwise. No Triton. Probed before cuda, which would otherwise claim the XPUs.
"""

from __future__ import annotations

import os

from anyaccel.backends.runtime_probe import RuntimeCheck, probe_runtime_of
from anyaccel.backends.torch_module import TorchModuleAccelerator
from anyaccel.probe import ProbeOutcome

#: How users check the runtime when it fails (Kunlunxin's own status tool).
RUNTIME_CHECK = RuntimeCheck(
    "`xpu_smi` lists the XPUs", "the Kunlunxin XPU driver and XPU runtime (XRE)"
)

#: Set to 1 for device event timers that measure (torch_xmlir's events read 0 without it).
EVENT_TIMER_ENV = "XPU_EVENT_KL3_ENABLE"

__all__ = ["EVENT_TIMER_ENV", "KlxpuAccelerator", "probe"]


def probe() -> ProbeOutcome:
    """Import torch_xmlir (only if installed) and count XPUs through its ``torch.cuda``."""
    return probe_runtime_of(
        KlxpuAccelerator,
        vendor="Kunlunxin XPU",
        install_hint="Install Kunlunxin's XPU driver and the {package} wheel matching torch.",
        check=RUNTIME_CHECK,
    )


class KlxpuAccelerator(TorchModuleAccelerator):
    """Kunlunxin XPUs through the ``torch.cuda`` that torch_xmlir provides."""

    _name = "klxpu"
    _communication_backend_name = "nccl"
    _compile_backend = "inductor"
    device_module_name = "cuda"
    runtime_package = "torch_xmlir"
    graph_class_name = "CUDAGraph"
    visible_devices_env_names = ("CUDA_VISIBLE_DEVICES",)
    export_env_prefixes = ("BKCL", "XPU", "XMLIR", "LD_LIBRARY", "PATH")

    # ------------------------------------------------------------------ device strings
    def device_name(self, device_index: int | None = None) -> str:
        """``'cuda'`` or ``'cuda:N'``: torch_xmlir's tensors live on the ``cuda`` device type."""
        return "cuda" if device_index is None else f"cuda:{device_index}"

    def current_device_name(self) -> str:
        """The current XPU as torch names it, e.g. ``'cuda:0'``."""
        return self.device_name(self.current_device())

    # ------------------------------------------------------------------ execution model
    def use_host_timers(self) -> bool:
        """Host timers, unless ``XPU_EVENT_KL3_ENABLE=1`` makes device event timers measure."""
        return os.environ.get(EVENT_TIMER_ENV, "0") != "1"

    def is_triton_supported(self) -> bool:
        """No Triton backend for Kunlunxin XPUs."""
        return False
