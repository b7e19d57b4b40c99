"""The reduce ops: the kernel's codes for them, and MIN/MAX that let a NaN win on gloo too.

The kernel's MIN and MAX let a NaN from any rank win, as ``torch.minimum``/``torch.maximum``
do; gloo compares with ``std::min``/``std::max``, which keep a NaN only where the ring happens
to hold it as the first operand, so a "max over ranks to find a NaN loss" check can miss it.
:func:`all_reduce_keeping_nan` runs a backend's all-reduce and then puts every rank's NaN back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["DTYPE_CODES", "OP_CODES", "all_reduce_keeping_nan", "drops_nan", "op_code"]

#: dtype -> the kernel's dtype code.
DTYPE_CODES: dict[torch.dtype, int] = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
#: ReduceOp -> the kernel's op code (the others go to torch.distributed). AVG divides in fp32
#: before rounding; MIN and MAX let a NaN win.
OP_CODES: dict[Any, int] = {
    dist.ReduceOp.SUM: 0,
    dist.ReduceOp.PRODUCT: 1,
    dist.ReduceOp.MIN: 2,
    dist.ReduceOp.MAX: 3,
    dist.ReduceOp.AVG: 4,
}


def op_code(op: Any) -> int | None:
    """The kernel's code for ``op`` (a ``ReduceOp`` or one of its members), None if it has none."""
    for candidate, code in OP_CODES.items():
        if op == candidate:
            return code
    return None


def drops_nan(tensor: torch.Tensor, op: Any) -> bool:
    """Whether gloo's ``op`` on ``tensor`` may drop a NaN: MIN or MAX of dense floating values."""
    return op_code(op) in (2, 3) and tensor.is_floating_point() and tensor.layout == torch.strided


def all_reduce_keeping_nan(
    tensor: torch.Tensor, op: Any, all_reduce: Callable[[torch.Tensor, Any], None]
) -> None:
    """``all_reduce(tensor, op)``, with NaN wherever any rank had one if ``op`` is MIN or MAX.

    ``all_reduce(t, op)`` reduces ``t`` in place over the group and waits. For MIN and MAX of
    floating tensors a second all-reduce (MAX of a byte mask, a quarter of fp32's traffic)
    finds where some rank had a NaN; other ops and dtypes take the one call.
    """
    if not drops_nan(tensor, op):
        all_reduce(tensor, op)
        return
    nans = torch.isnan(tensor.detach()).to(torch.uint8)
    all_reduce(tensor, op)
    all_reduce(nans, dist.ReduceOp.MAX)
    tensor.detach().masked_fill_(nans.bool(), float("nan"))
