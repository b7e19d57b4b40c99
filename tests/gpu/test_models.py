"""The shape sets the GPU optimizer checks use (plain CPU facts, no GPU needed)."""

from __future__ import annotations

import math

from .models import SHAPE_SETS, gpt2_small_shapes, small_shapes


def test_gpt2_small_has_148_tensors_and_124m_parameters() -> None:
    shapes = gpt2_small_shapes()
    assert len(shapes) == 148
    assert sum(math.prod(shape) for shape in shapes) == 124_439_808


def test_small_shapes_are_repeatable_and_in_range() -> None:
    shapes = small_shapes()
    assert len(shapes) == 1000 and shapes == small_shapes()
    assert all(1 <= shape[0] <= 4096 for shape in shapes)
    assert len(set(shapes)) > 500  # varied sizes, not one size repeated
    assert set(SHAPE_SETS) == {"one-tensor", "gpt2-small", "1000-small"}
