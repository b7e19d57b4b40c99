"""Acme during bring-up, written the DeepSpeed way: the ``acme`` name, computing in host memory.

Before Acme's device kernels exist, this class gives the launcher, ``get_accelerator()``,
collectives (over ``gloo``) and the integrations a named accelerator that really trains, on
the CPU. Like a DeepSpeed accelerator it sets its names in ``__init__`` and does not call
``super().__init__()``: anyaccel's base classes need neither. It is opt-in: its probe finds it
only with ``ACME_BRINGUP=1``, so an installed package never shadows real hardware.
"""

from __future__ import annotations

import os

from anyaccel.backends.cpu import CpuAccelerator
from anyaccel.probe import ProbeOutcome


class AcmeBringUp(CpuAccelerator):
    """Acme's name and collectives over the host CPU, until the board's kernels exist."""

    detection_priority = "after:generic"  # never ahead of real hardware

    def __init__(self) -> None:
        self._name = "acme"
        self._communication_backend_name = "gloo"  # "accl" once Acme's collectives exist
        self._compile_backend = "inductor"

    @staticmethod
    def probe() -> ProbeOutcome:
        """Found only when bring-up mode is switched on."""
        if os.environ.get("ACME_BRINGUP") != "1":
            return ProbeOutcome.not_installed(
                "Acme bring-up mode is off", "Set ACME_BRINGUP=1 to train as 'acme' on the host."
            )
        return ProbeOutcome.found("Acme bring-up mode: computing in host memory", 1)
