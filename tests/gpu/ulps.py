"""Tolerances in units in the last place (ulps): how far apart two floats are in their dtype.

The GPU checks compare our results with torch's on the same device; every tolerance is a number
of representable values of the compared dtype, so "4 ulps" means the same thing at 1e-6 and 1e3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

#: Same-width signed integers to read each float dtype's bits through.
_BITS = {
    torch.float64: torch.int64,
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
}

#: The distance given to a NaN compared with a number: larger than any tolerance.
UNEQUAL_NAN = 2**62

#: Explicit mantissa bits of each dtype: the spacing of values in [1, 2) is 2**-bits.
_MANTISSA_BITS = {torch.float64: 52, torch.float32: 23, torch.float16: 10, torch.bfloat16: 7}


def ulp_size(magnitude: float, dtype: torch.dtype) -> float:
    """The spacing of ``dtype``'s representable values at ``magnitude`` (normal range)."""
    if magnitude <= 0.0:
        raise ValueError(f"ulp_size needs a positive magnitude, got {magnitude!r}")
    _mantissa, exponent = math.frexp(magnitude)  # magnitude = m * 2**exponent, 0.5 <= m < 1
    smallest_normal_exponent = math.frexp(torch.finfo(dtype).tiny)[1]
    return 2.0 ** (max(exponent, smallest_normal_exponent) - 1 - _MANTISSA_BITS[dtype])


def _ordered_bits(values: torch.Tensor) -> torch.Tensor:
    """The float bits as int64s that sort like the floats (-0.0 and +0.0 both map to 0)."""
    bits = values.contiguous().view(_BITS[values.dtype]).to(torch.int64)
    lowest = -(2 ** (torch.iinfo(_BITS[values.dtype]).bits - 1))
    return torch.where(bits >= 0, bits, lowest - bits)


def ulp_distance(actual: torch.Tensor, expected: torch.Tensor, floor: float = 0.0) -> torch.Tensor:
    """Elementwise count of representable values between ``actual`` and ``expected`` (int64).

    Both must have one float dtype and one shape; they may live on any device (the answer is
    on the CPU). Two NaNs are 0 apart; a NaN and a number are ``UNEQUAL_NAN`` apart. Where
    ``expected`` is smaller than ``floor`` in magnitude the difference is counted in ulps at
    ``floor`` (rounded to nearest): a value that cancelled to near zero is judged at the scale
    of the values it came from, not at its own far finer precision.
    """
    if actual.dtype != expected.dtype or actual.dtype not in _BITS:
        raise TypeError(
            f"ulp_distance compares two tensors of one float dtype, got {actual.dtype} and "
            f"{expected.dtype}; convert them to the dtype whose ulps you mean first"
        )
    if actual.shape != expected.shape:
        raise ValueError(f"shapes differ: {tuple(actual.shape)} vs {tuple(expected.shape)}")
    actual, expected = actual.detach().cpu(), expected.detach().cpu()
    distance = (_ordered_bits(actual) - _ordered_bits(expected)).abs()
    if floor > 0.0:
        small = expected.abs() < floor
        at_floor = (actual.double() - expected.double()).abs() / ulp_size(floor, actual.dtype)
        at_floor = at_floor.round().clamp(max=UNEQUAL_NAN).nan_to_num(UNEQUAL_NAN).to(torch.int64)
        distance = torch.where(small, torch.minimum(distance, at_floor), distance)
    nan_a, nan_e = actual.isnan(), expected.isnan()
    distance = torch.where(nan_a & nan_e, torch.zeros_like(distance), distance)
    return torch.where(nan_a ^ nan_e, torch.full_like(distance, UNEQUAL_NAN), distance)


@dataclass(frozen=True)
class UlpComparison:
    """The worst element of one comparison: its flat index, both values and their distance."""

    what: str
    dtype: torch.dtype
    max_ulps: int
    index: int
    actual: float
    expected: float
    elements: int

    def describe(self) -> str:
        """One line for a report or an assertion message."""
        return (
            f"{self.what}: worst {self.max_ulps} ulp(s) of {self.dtype} at element {self.index} "
            f"of {self.elements} (ours {self.actual!r}, torch {self.expected!r})"
        )


def compare_ulps(
    actual: torch.Tensor, expected: torch.Tensor, what: str, floor: float = 0.0
) -> UlpComparison:
    """The worst ulp distance between ``actual`` and ``expected`` (see ``ulp_distance``)."""
    distance = ulp_distance(actual, expected, floor).flatten()
    if distance.numel() == 0:
        return UlpComparison(what, actual.dtype, 0, -1, 0.0, 0.0, 0)
    index = int(distance.argmax())
    return UlpComparison(
        what,
        actual.dtype,
        int(distance[index]),
        index,
        float(actual.detach().flatten()[index]),
        float(expected.detach().flatten()[index]),
        distance.numel(),
    )


def assert_within_ulps(
    actual: torch.Tensor, expected: torch.Tensor, max_ulps: int, what: str, floor: float = 0.0
) -> UlpComparison:
    """Fail, naming ``what`` and the worst element, unless every element is within ``max_ulps``."""
    found = compare_ulps(actual, expected, what, floor)
    if found.max_ulps > max_ulps:
        raise AssertionError(f"{found.describe()}; the tolerance is {max_ulps} ulp(s)")
    return found
