"""Mixed precision that keeps its promise on every accelerator: the half type autocast runs in,
and whether a gradient scaler belongs with it.

``torch.cuda.amp.autocast()`` means float16 on CUDA; ``torch.autocast(device_type=...)`` without
a dtype means the device's own default, which is bfloat16 on the CPU. Code that names float16
(or relies on CUDA's default) asks :func:`autocast_dtype` instead, and enables its
``GradScaler`` with :func:`grad_scaler_applies`: float16 where the device computes it, else
bfloat16 with the scaler off (bfloat16 has float32's range and needs no loss scaling).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from anyaccel.abstract import Accelerator

__all__ = ["HALF_DTYPES", "autocast_dtype", "grad_scaler_applies"]

#: The two half-precision types autocast runs in.
HALF_DTYPES = (torch.float16, torch.bfloat16)


def _current(accelerator: Accelerator | None) -> Accelerator:
    if accelerator is not None:
        return accelerator
    from anyaccel.detection import get_accelerator

    return get_accelerator()


def _supports(accelerator: Accelerator, dtype: torch.dtype) -> bool:
    if dtype == torch.float16:
        return bool(accelerator.is_fp16_supported())
    return bool(accelerator.is_bf16_supported())


def autocast_dtype(
    preferred: torch.dtype = torch.float16, accelerator: Accelerator | None = None
) -> torch.dtype:
    """The dtype for ``torch.autocast``: ``preferred`` where the accelerator computes it.

    For a half type the device lacks, the other half type when the device has that one; with
    neither, ``preferred`` as given (torch then warns and runs autocast disabled). Any other
    dtype is returned as it is.

    :raises TypeError: ``preferred`` is not a ``torch.dtype``.
    """
    if not isinstance(preferred, torch.dtype):
        raise TypeError(
            f"autocast_dtype() takes a torch.dtype such as torch.float16, not {preferred!r}"
        )
    if preferred not in HALF_DTYPES:
        return preferred
    device = _current(accelerator)
    if _supports(device, preferred):
        return preferred
    other = torch.bfloat16 if preferred == torch.float16 else torch.float16
    return other if _supports(device, other) else preferred


def grad_scaler_applies(
    preferred: torch.dtype = torch.float16, accelerator: Accelerator | None = None
) -> bool:
    """Whether a ``GradScaler`` should be enabled next to ``autocast_dtype(preferred)``.

    Only float16 autocast needs loss scaling, and only where the device computes float16.
    """
    return autocast_dtype(preferred, accelerator) == torch.float16 and _supports(
        _current(accelerator), torch.float16
    )
