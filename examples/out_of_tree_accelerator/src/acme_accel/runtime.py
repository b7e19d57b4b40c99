"""Stand-in for Acme's PyTorch extension, which a real vendor ships as compiled code.

Like such extensions (torch_npu, torch_mlu, ...) it renames torch's PrivateUse1 backend to
``acme`` and registers a ``torch.cuda``-shaped module as ``torch.acme``. Here the boards are
emulated by anyaccel's simulated device module; ``ACME_BOARDS`` says how many there are.
"""

from __future__ import annotations

import os

import torch

from anyaccel.testing.simulated import SimulatedDeviceModule


def board_count() -> int:
    """How many boards are plugged in (emulated: ``ACME_BOARDS`` when the runtime loads)."""
    module = getattr(torch, "acme", None)
    if module is not None:
        return int(module.device_count())
    return int(os.environ.get("ACME_BOARDS", "0"))


def _install() -> None:
    if torch._C._get_privateuse1_backend_name() != "acme":
        torch.utils.rename_privateuse1_backend("acme")
    if getattr(torch, "acme", None) is None:
        module = SimulatedDeviceModule(
            "torch.acme",
            device_type="acme",
            device_count=board_count(),
            device_name="Acme Board",
            graph_class_name=None,
            profiler_name=None,
            host_register=None,
        )
        torch._register_device_module("acme", module)


_install()
