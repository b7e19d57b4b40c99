"""autocast_dtype and grad_scaler_applies: the half type a device computes, and its scaler."""

from __future__ import annotations

import pytest
import torch

from anyaccel import autocast_dtype, grad_scaler_applies, set_accelerator
from anyaccel.backends.cpu import CpuAccelerator


class _Halves(CpuAccelerator):
    """A CPU answering for the half types given."""

    def __init__(self, fp16: bool, bf16: bool) -> None:
        super().__init__()
        self._fp16, self._bf16 = fp16, bf16

    def is_fp16_supported(self) -> bool:
        return self._fp16

    def is_bf16_supported(self) -> bool:
        return self._bf16


@pytest.mark.parametrize(
    ("fp16", "bf16", "preferred", "dtype", "scaler"),
    [
        (True, True, torch.float16, torch.float16, True),
        (True, True, torch.bfloat16, torch.bfloat16, False),
        (False, True, torch.float16, torch.bfloat16, False),  # never bf16 with a scaler on
        (True, False, torch.bfloat16, torch.float16, True),
        (False, False, torch.float16, torch.float16, False),  # autocast then disables itself
        (True, True, torch.float32, torch.float32, False),
    ],
)
def test_the_dtype_and_the_scaler_follow_what_the_device_computes(
    fp16: bool, bf16: bool, preferred: torch.dtype, dtype: torch.dtype, scaler: bool
) -> None:
    device = _Halves(fp16, bf16)
    assert autocast_dtype(preferred, device) == dtype
    assert grad_scaler_applies(preferred, device) is scaler


def test_the_current_accelerator_is_asked_by_default() -> None:
    set_accelerator(_Halves(fp16=False, bf16=True))
    assert autocast_dtype() == torch.bfloat16 and grad_scaler_applies() is False


def test_a_dtype_that_is_not_one_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match=r"takes a torch\.dtype.*not 'float16'"):
        autocast_dtype("float16")  # type: ignore[arg-type]
