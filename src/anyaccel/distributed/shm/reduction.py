"""The reduce ops: every op on gloo with the same meaning as in the kernel.

The kernel's MIN and MAX let a NaN from any rank win, as ``torch.minimum``/``torch.maximum``
do; gloo compares with ``std::min``/``std::max``, which keep a NaN only where the ring happens
to hold it as the first operand, so a "max over ranks to find a NaN loss" check can miss it.
:func:`all_reduce_keeping_nan` runs a backend's all-reduce and then puts every rank's NaN back.

:func:`all_reduce_as_nccl` gives a gloo all-reduce the ops gloo lacks or computes otherwise:
AVG (floating: the exact mean, as the kernel computes it; integers: NCCL's wrapped sum divided
by the world size, truncated toward zero) and PREMUL_SUM (each rank's tensor times the factor
in its dtype, then summed), on top of the NaN rule above.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

__all__ = [
    "all_reduce_as_nccl",
    "all_reduce_keeping_nan",
    "drops_nan",
    "gloo_differs",
    "premultiplied",
]


def drops_nan(tensor: torch.Tensor, op: Any) -> bool:
    """Whether gloo's ``op`` on ``tensor`` may drop a NaN: MIN or MAX of dense floating values."""
    # ``op == member``, never ``op in (...)``: a ReduceOp equals its type only on its own side
    min_or_max = op == dist.ReduceOp.MIN or op == dist.ReduceOp.MAX
    return min_or_max and tensor.is_floating_point() and tensor.layout == torch.strided


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
    if tensor.dtype in (torch.float16, torch.bfloat16):
        # torch 2.4's gloo sums half types whatever the op; float32 holds them exactly
        wide = tensor.detach().float()
        all_reduce_keeping_nan(wide, op, all_reduce)
        tensor.detach().copy_(wide)
        return
    nans = torch.isnan(tensor.detach()).to(torch.uint8)
    all_reduce(tensor, op)
    all_reduce(nans, dist.ReduceOp.MAX)
    tensor.detach().masked_fill_(nans.bool(), float("nan"))


#: The dtypes PREMUL_SUM takes, as torch's NCCL backend takes them.
PREMUL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _premul_factor(op: Any) -> Any:
    """The factor of a PREMUL_SUM op (``dist._make_nccl_premul_sum``): a float or a tensor."""
    return op.__getstate__()[1]


def premultiplied(tensor: torch.Tensor, op: Any) -> torch.Tensor | None:
    """``tensor`` times PREMUL_SUM ``op``'s factor (a new tensor), or None for any other op.

    The factor is converted to the tensor's dtype first, as NCCL's ``ncclRedOpCreatePreMulSum``
    takes it. Raises ``TypeError`` for a dtype that is not floating, as torch's NCCL does.
    """
    if op != dist.ReduceOp.PREMUL_SUM:
        return None
    if tensor.dtype not in PREMUL_DTYPES:
        raise TypeError(
            f"PREMUL_SUM takes float16, bfloat16, float32 or float64 tensors (as torch's NCCL "
            f"backend does), not {tensor.dtype}: multiply by the factor and use SUM instead"
        )
    factor = torch.as_tensor(_premul_factor(op)).to(tensor.dtype).reshape(())
    return tensor.detach() * factor


def gloo_differs(tensor: torch.Tensor, op: Any) -> bool:
    """Whether gloo's own all-reduce of ``tensor`` would lack ``op`` or give it another meaning."""
    # ``op == member``, never ``op in (...)``: a ReduceOp equals its type only on its own side
    avg_or_premul = op == dist.ReduceOp.AVG or op == dist.ReduceOp.PREMUL_SUM
    return avg_or_premul or drops_nan(tensor, op)


def all_reduce_as_nccl(
    tensor: torch.Tensor, op: Any, world_size: int, all_reduce: Callable[[torch.Tensor, Any], None]
) -> None:
    """Reduce ``tensor`` in place over ``world_size`` ranks with ``op``, using only
    ``all_reduce(t, op)`` for SUM, PRODUCT, MIN and MAX (gloo's).

    AVG of floating tensors is the exact mean (summed in float64, divided, rounded once), of
    integers NCCL's wrapped sum divided by ``world_size`` and truncated toward zero; AVG of
    bool tensors raises ``TypeError`` (torch's NCCL refuses it too). PREMUL_SUM: see
    :func:`premultiplied`. MIN and MAX let a NaN win (:func:`all_reduce_keeping_nan`).
    """
    target = tensor.detach()
    if target.is_complex():  # as torch.distributed.all_reduce does: on the real view
        if not (
            op == dist.ReduceOp.SUM or op == dist.ReduceOp.AVG or op == dist.ReduceOp.PREMUL_SUM
        ):
            raise TypeError(f"{op} of a complex tensor has no meaning: use SUM, AVG or PREMUL_SUM")
        target = torch.view_as_real(target)
    if op == dist.ReduceOp.AVG:
        if target.dtype == torch.bool:
            raise TypeError(
                "AVG of a bool tensor has no meaning (torch's NCCL refuses it too): use MAX "
                "for any rank, MIN for every rank, or SUM of an integer tensor to count"
            )
        if target.is_floating_point():
            wide = target.to(torch.float64)
            all_reduce(wide, dist.ReduceOp.SUM)
            target.copy_(wide.div_(world_size))
        else:  # NCCL's ncclAvg on integers: the sum, then |sum| // n with the sign kept
            all_reduce(target, dist.ReduceOp.SUM)
            target.copy_(torch.div(target, world_size, rounding_mode="trunc"))
        return
    scaled = premultiplied(target, op)
    if scaled is not None:
        target.copy_(scaled)
        all_reduce(target, dist.ReduceOp.SUM)
        return
    all_reduce_keeping_nan(target, op, all_reduce)
