"""torch.compile's inductor on the emulated device: refused with a message that names the fix.

Inductor has no code generator for a PrivateUse1 device it does not know and fails with a bare
``KeyError``. This registers, through inductor's (private) per-device codegen table, one that
refuses clearly; where that table is not found, torch's own error stays.
"""

from __future__ import annotations

import logging
from typing import Any, NoReturn

__all__ = ["refuse_inductor"]

logger = logging.getLogger("anyaccel.ops")


def _refusal(device_type: str) -> type:
    message = (
        f"torch.compile's inductor backend cannot generate code for the emulated {device_type!r} "
        "device (its kernels are torch's CPU kernels behind a device guard); compile with "
        "backend='aot_eager' (get_accelerator().get_compile_backend() names it) or 'eager'"
    )

    class Refusing(type):
        def __getattr__(cls, name: str) -> NoReturn:
            raise RuntimeError(message)

        def __call__(cls, *args: Any, **kwargs: Any) -> NoReturn:
            raise RuntimeError(message)

    return Refusing(f"NoInductorFor_{device_type}", (), {})


def refuse_inductor(device_type: str) -> bool:
    """Make inductor refuse ``device_type`` with a clear message; whether the hook is in place."""
    try:
        from torch._inductor.codegen.common import register_backend_for_device
    except ImportError as exc:  # inductor moved its table: torch's own error stays
        logger.debug("inductor's codegen table is not where expected (%s)", exc)
        return False
    refusing = _refusal(device_type)
    register_backend_for_device(device_type, refusing, refusing)
    return True
