"""The Acme accelerator: ``torch.acme`` mirrors ``torch.cuda``, so the subclass is a data sheet."""

from __future__ import annotations

from anyaccel.backends.torch_module import TorchModuleAccelerator
from anyaccel.probe import ProbeOutcome


class AcmeAccelerator(TorchModuleAccelerator):
    """Acme boards through the ``torch.acme`` device module."""

    _name = "acme"
    _communication_backend_name = "gloo"
    runtime_package = "acme_accel.runtime"  # imported first; it attaches torch.acme
    visible_devices_env_names = ("ACME_VISIBLE_DEVICES",)
    export_env_prefixes = ("ACME",)
    detection_priority = "before:cuda"

    @staticmethod
    def probe() -> ProbeOutcome:
        """Count boards without opening one (so detection stays fork-safe)."""
        from acme_accel import runtime

        count = runtime.board_count()
        if count == 0:
            return ProbeOutcome.no_device("no Acme board found", "Check ACME_BOARDS.")
        return ProbeOutcome.found(f"{count} Acme board(s)", count)
