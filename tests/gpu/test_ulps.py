"""The ulp measure every GPU check's tolerance is stated in, checked on CPU tensors (no GPU)."""

from __future__ import annotations

import math

import pytest
import torch

from .ulps import UNEQUAL_NAN, assert_within_ulps, compare_ulps, ulp_distance, ulp_size


@pytest.mark.parametrize(
    ("dtype", "step"),
    [(torch.float32, 2.0**-23), (torch.bfloat16, 2.0**-7), (torch.float16, 2.0**-10)],
)
def test_neighbours_of_one_are_one_ulp_apart(dtype: torch.dtype, step: float) -> None:
    one = torch.tensor([1.0], dtype=dtype)
    assert ulp_distance(one + step, one).tolist() == [1]
    assert ulp_distance(one + 3 * step, one).tolist() == [3]
    assert ulp_distance(-(one + 2 * step), -one).tolist() == [2]


def test_distance_counts_across_zero_and_ignores_the_sign_of_zero() -> None:
    tiny = torch.tensor([2.0**-149], dtype=torch.float32)  # the smallest subnormal
    assert ulp_distance(tiny, -tiny).tolist() == [2]
    assert ulp_distance(torch.tensor([0.0]), torch.tensor([-0.0])).tolist() == [0]


def test_distance_matches_nextafter_walks_in_float64() -> None:
    start = torch.tensor([1e-3, -7.5, 123456.0], dtype=torch.float64)
    walked = start.clone()
    for _ in range(5):
        walked = torch.nextafter(walked, torch.full_like(walked, math.inf))
    assert ulp_distance(walked, start).tolist() == [5, 5, 5]


def test_nan_is_equal_to_nan_and_far_from_any_number() -> None:
    nan, one = torch.tensor([math.nan]), torch.tensor([1.0])
    assert ulp_distance(nan, nan).tolist() == [0]
    assert ulp_distance(nan, one).tolist() == [UNEQUAL_NAN]


def test_mixed_dtypes_and_shapes_are_refused_with_the_remedy() -> None:
    with pytest.raises(TypeError, match="convert them"):
        ulp_distance(torch.zeros(2), torch.zeros(2, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"\(2,\) vs \(3,\)"):
        ulp_distance(torch.zeros(2), torch.zeros(3))


def test_compare_names_the_worst_element() -> None:
    expected = torch.tensor([1.0, 2.0, 3.0])
    actual = expected.clone()
    actual[1] = torch.nextafter(torch.nextafter(actual[1], actual[2]), actual[2])
    found = compare_ulps(actual, expected, "exp_avg")
    assert (found.max_ulps, found.index, found.expected, found.elements) == (2, 1, 2.0, 3)
    assert "exp_avg: worst 2 ulp(s) of torch.float32 at element 1 of 3" in found.describe()


def test_assert_within_ulps_passes_at_the_tolerance_and_fails_beyond_it() -> None:
    expected = torch.tensor([1.0, -1.0], dtype=torch.bfloat16)
    actual = expected + torch.tensor([2.0**-6, 0.0], dtype=torch.bfloat16)  # 2 ulps at 1.0
    assert assert_within_ulps(actual, expected, 2, "param").max_ulps == 2
    with pytest.raises(AssertionError, match=r"param: worst 2 ulp.*tolerance is 1 ulp"):
        assert_within_ulps(actual, expected, 1, "param")


def test_empty_tensors_compare_as_equal() -> None:
    assert compare_ulps(torch.zeros(0), torch.zeros(0), "none").max_ulps == 0


@pytest.mark.parametrize(
    ("magnitude", "dtype", "size"),
    [
        (1.0, torch.float32, 2.0**-23),
        (1.5, torch.float32, 2.0**-23),
        (2.0, torch.float32, 2.0**-22),
        (1e-3, torch.bfloat16, 2.0**-17),
        (1e-30, torch.float16, 2.0**-24),  # below fp16's normals: its subnormal spacing
    ],
)
def test_ulp_size_is_the_spacing_at_a_magnitude(
    magnitude: float, dtype: torch.dtype, size: float
) -> None:
    assert ulp_size(magnitude, dtype) == size


def test_ulp_size_refuses_zero() -> None:
    with pytest.raises(ValueError, match="positive magnitude"):
        ulp_size(0.0, torch.float32)


def test_a_floor_judges_cancelled_values_at_the_floors_scale() -> None:
    expected = torch.tensor([1e-9, 1.0])
    actual = torch.tensor([1e-9 + 2.0**-23, 1.0])  # 1 ulp at 1.0, millions at 1e-9
    assert ulp_distance(actual, expected)[0] > 1_000_000
    assert ulp_distance(actual, expected, floor=1.0).tolist() == [1, 0]
    # at or above the floor the exact count still applies
    above = torch.tensor([1.0 + 2.0**-21])
    assert ulp_distance(above, torch.tensor([1.0]), floor=0.5).tolist() == [4]
    assert assert_within_ulps(actual, expected, 1, "m", floor=1.0).max_ulps == 1
