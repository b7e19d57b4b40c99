"""``FloatTensor`` and friends take sizes or data on every backend, and answer ``isinstance``."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from anyaccel.backends.cpu import CpuAccelerator
from anyaccel.tensor_types import TensorType

FLOAT = TensorType("FloatTensor", torch.float32, "cpu")


@given(st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=4))
def test_int_arguments_are_sizes(sizes: list[int]) -> None:
    tensor = FLOAT(*sizes)
    assert tuple(tensor.shape) == tuple(sizes)
    assert tensor.dtype == torch.float32 and tensor.device.type == "cpu"


def test_one_int_is_a_length_as_torch_legacy_types_have_it() -> None:
    assert FLOAT(2).shape == torch.FloatTensor(2).shape == (2,)


def test_a_torch_size_is_a_shape_and_a_list_or_tuple_is_data() -> None:
    assert FLOAT(torch.Size([2, 3])).shape == (2, 3)
    assert FLOAT([2, 3]).tolist() == [2.0, 3.0]
    assert FLOAT((2, 3)).tolist() == [2.0, 3.0]


def test_no_argument_is_an_empty_tensor() -> None:
    assert FLOAT().shape == torch.FloatTensor().shape == (0,)


def test_a_number_or_tensor_is_data_copied_to_the_type() -> None:
    assert FLOAT(2.5).item() == 2.5
    source = torch.arange(3)
    made = FLOAT(source)
    assert made.dtype == torch.float32 and made.tolist() == [0.0, 1.0, 2.0]
    made[0] = 7
    assert source[0] == 0  # a copy, not a view


def test_keywords_reach_torch() -> None:
    assert FLOAT([1.0], requires_grad=True).requires_grad
    assert FLOAT(3, requires_grad=True).requires_grad
    assert TensorType("LongTensor", torch.int64, "cpu")(torch.ones(2), device="cpu").dtype == (
        torch.int64
    )


def test_mixing_sizes_and_data_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match=r"FloatTensor\(2, \[1\]\): give sizes as ints"):
        FLOAT(2, [1])
    with pytest.raises(TypeError, match="not a mix"):
        FLOAT(2, 2.5)


def test_isinstance_checks_dtype_and_device_type() -> None:
    assert isinstance(torch.zeros(2), FLOAT)
    assert not isinstance(torch.zeros(2, dtype=torch.float64), FLOAT)
    assert not isinstance([1.0], FLOAT)
    assert not isinstance(torch.zeros(2, device="meta"), FLOAT)
    assert isinstance(torch.zeros(2, device="meta"), TensorType("F", torch.float32, "meta"))


def test_types_compare_by_dtype_and_device() -> None:
    acc = CpuAccelerator()
    assert acc.FloatTensor == acc.FloatTensor == FLOAT
    assert acc.FloatTensor != acc.HalfTensor
    assert len({acc.FloatTensor, acc.FloatTensor, acc.LongTensor}) == 2
    assert repr(acc.FloatTensor) == "<FloatTensor torch.float32 on 'cpu'>"


@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("BFloat16Tensor", torch.bfloat16),
        ("ByteTensor", torch.uint8),
        ("DoubleTensor", torch.float64),
        ("FloatTensor", torch.float32),
        ("HalfTensor", torch.float16),
        ("IntTensor", torch.int32),
        ("LongTensor", torch.int64),
    ],
)
def test_cpu_types_behave_like_torch_legacy_types(name: str, dtype: torch.dtype) -> None:
    ours = getattr(CpuAccelerator(), name)
    legacy = getattr(torch, name)
    assert ours(2).shape == legacy(2).shape and ours(2).dtype == legacy(2).dtype == dtype
    assert ours([1, 2]).tolist() == legacy([1, 2]).tolist()
    made = ours([1, 2, 3])
    assert made.dtype == dtype and made.device.type == "cpu" and made.tolist() == [1, 2, 3]
    assert isinstance(legacy([1]), ours) and isinstance(ours([1]), legacy)
