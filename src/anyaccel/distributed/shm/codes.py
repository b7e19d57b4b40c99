"""The kernel's codes for dtypes, reduce ops and collectives, read from the compiled kernel.

They are defined once, in ``ops/cpu/csrc/shm_contract.h``; the kernel's module exports them
by name (``DTYPE_CODES``, ``OP_CODES``, ``COLLECTIVE_CODES``) and :func:`kernel_codes` maps the
names to torch's dtypes and ``ReduceOp`` members. Python never restates a number, so Python
and the kernel cannot disagree. Reading them loads the kernel (built on first use, cached), so
callers ask only once a group has a communicator (which needed the kernel anyway).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

from anyaccel.distributed.shm.group import load_kernel
from anyaccel.forksafe import ForkSafeLock

__all__ = ["TABLES", "KernelCodes", "codes_of", "kernel_codes", "table"]


class KernelCodes(NamedTuple):
    """The codes the kernel takes, by what they stand for."""

    #: dtype -> its code (the dtypes the kernel reduces; any other goes to torch.distributed).
    dtypes: dict[torch.dtype, int]
    #: ReduceOp member -> its code (the ops the kernel computes; PREMUL_SUM is a premultiplied
    #: SUM, the others go to torch.distributed). AVG divides in fp64; MIN and MAX let a NaN win.
    ops: dict[Any, int]
    #: collective name -> its code, as the kernel tells rounds apart (and a rank announces a
    #: gloo fallback with).
    collectives: dict[str, int]

    def op_code(self, op: Any) -> int | None:
        """The code for ``op`` (a ``ReduceOp`` or one of its members), None if it has none."""
        for candidate, code in self.ops.items():
            if op == candidate:  # ``==``, never ``in``: a ReduceOp equals its type one way only
                return code
        return None

    def collective_name(self, code: int) -> str:
        """The collective ``code`` stands for (the code itself, as text, if none)."""
        for name, known in self.collectives.items():
            if known == code:
                return name
        return str(code)


def codes_of(kernel: ModuleType) -> KernelCodes:
    """The codes ``kernel`` (the compiled ``ShmCommBuilder`` module) exports.

    Raises ``AttributeError`` naming the dtype or op when the kernel names one torch lacks.
    """
    return KernelCodes(
        dtypes={getattr(torch, name): code for name, code in kernel.DTYPE_CODES.items()},
        ops={getattr(dist.ReduceOp, name): code for name, code in kernel.OP_CODES.items()},
        collectives=dict(kernel.COLLECTIVE_CODES),
    )


_codes: KernelCodes | None = None
_lock = ForkSafeLock()


def kernel_codes() -> KernelCodes:
    """The loaded kernel's codes (read once per process; loads the kernel if it is not yet).

    Raises what loading the kernel raises (``anyaccel.ops.errors.OpError``).
    """
    global _codes
    if _codes is None:
        with _lock:
            if _codes is None:
                _codes = codes_of(load_kernel())
    return _codes


#: The module-level names the codes were once imported under (``from anyaccel.distributed.shm
#: import DTYPE_CODES``), each with the :class:`KernelCodes` field it now reads.
TABLES = {"DTYPE_CODES": "dtypes", "OP_CODES": "ops"}


def table(name: str, module: str) -> dict[Any, int]:
    """The code table an old name stands for (a module's ``__getattr__``), read from the kernel.

    Raises ``AttributeError`` for any other ``name``, as a module without it does.
    """
    field = TABLES.get(name)
    if field is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    tables: dict[Any, int] = getattr(kernel_codes(), field)
    return tables
