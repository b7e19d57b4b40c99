"""``reduction``: the kernel's op codes, and every op on top of a gloo-like all-reduce.

Two threads stand in for two ranks; their all-reduce exchanges tensors and combines them the
way gloo does (``std::min``/``std::max``, which keep the first operand when a NaN is compared,
and sums in the tensor's dtype), so the helpers are checked against the backend they repair.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.distributed as dist

from anyaccel.distributed.shm.reduction import (
    all_reduce_as_nccl,
    drops_nan,
    gloo_differs,
    premultiplied,
)

R = dist.ReduceOp


def gloo_like(op: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """What gloo computes from two ranks' tensors (rank 0's first)."""
    if op == R.SUM:
        return a + b
    if op == R.PRODUCT:
        return a * b
    if op == R.MIN:
        return torch.where(b < a, b, a)  # std::min(a, b): a NaN in b is dropped
    if op == R.MAX:
        return torch.where(a < b, b, a)
    raise AssertionError(f"gloo has no {op}")


def on_two_ranks(
    inputs: list[torch.Tensor], run: Callable[[torch.Tensor, Callable[..., None]], None]
) -> list[torch.Tensor | BaseException]:
    """``run(tensor, all_reduce)`` on two threads; the outputs (or what each raised)."""
    barrier = threading.Barrier(2)
    posted: dict[int, list[torch.Tensor]] = {0: [], 1: []}
    results: list[torch.Tensor | BaseException] = [inputs[0], inputs[1]]

    def rank(r: int) -> None:
        def all_reduce(tensor: torch.Tensor, op: Any) -> None:
            posted[r].append(tensor.clone())
            barrier.wait(timeout=10)
            mine, theirs = posted[0][-1], posted[1][-1]
            tensor.copy_(gloo_like(op, mine, theirs))
            barrier.wait(timeout=10)

        try:
            run(results[r], all_reduce)  # type: ignore[arg-type]
        except BaseException as exc:  # reported to the test
            results[r] = exc
            barrier.abort()

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


def test_only_floating_min_and_max_may_drop_a_nan() -> None:
    assert drops_nan(torch.ones(2), R.MIN) and drops_nan(torch.ones(2, dtype=torch.half), R.MAX)
    assert not drops_nan(torch.ones(2), R.SUM)
    assert not drops_nan(torch.ones(2, dtype=torch.int64), R.MIN)
    premul = dist._make_nccl_premul_sum(2.0)
    assert gloo_differs(torch.ones(2, dtype=torch.int64), R.AVG)
    assert gloo_differs(torch.ones(2), premul) and not gloo_differs(torch.ones(2), R.SUM)


@pytest.mark.parametrize("name", ["MIN", "MAX"])
def test_a_nan_on_the_second_rank_survives_a_backend_that_drops_it(name: str) -> None:
    nan = float("nan")
    inputs = [torch.tensor([1.0, nan, 3.0]), torch.tensor([nan, 2.0, 4.0])]
    op = getattr(R, name)
    dropped = gloo_like(op, inputs[0], inputs[1])
    assert not dropped[0].isnan()  # the backend alone loses rank 1's NaN
    results = on_two_ranks(
        [t.clone() for t in inputs], lambda t, reduce: all_reduce_as_nccl(t, op, 2, reduce)
    )
    for result in results:
        assert isinstance(result, torch.Tensor)
        assert result[:2].isnan().all() and result[2].item() == (3.0 if name == "MIN" else 4.0)


def test_integer_avg_is_the_wrapped_sum_truncated_toward_zero() -> None:
    inputs = [
        torch.tensor([7, 100, 5], dtype=torch.int8),
        torch.tensor([-8, 100, 0], dtype=torch.int8),
    ]
    results = on_two_ranks(
        [t.clone() for t in inputs], lambda t, reduce: all_reduce_as_nccl(t, R.AVG, 2, reduce)
    )
    for result in results:  # -1 // 2 toward zero is 0; 200 wraps to -56, halved: -28
        assert isinstance(result, torch.Tensor) and result.tolist() == [0, -28, 2]


def test_half_avg_is_the_mean_even_where_the_half_sum_overflows() -> None:
    values = torch.tensor([40000.0, 60000.0, -50000.0], dtype=torch.half)
    results = on_two_ranks(
        [values.clone(), values.clone()],
        lambda t, reduce: all_reduce_as_nccl(t, R.AVG, 2, reduce),
    )
    for result in results:
        assert isinstance(result, torch.Tensor) and torch.equal(result, values)


def test_premul_sum_multiplies_in_the_dtype_then_sums() -> None:
    op = dist._make_nccl_premul_sum(torch.tensor([0.5]))
    inputs = [torch.tensor([2.0, 4.0], dtype=torch.bfloat16), torch.tensor([6.0, 1.0],
              dtype=torch.bfloat16)]  # fmt: skip
    results = on_two_ranks(
        [t.clone() for t in inputs], lambda t, reduce: all_reduce_as_nccl(t, op, 2, reduce)
    )
    for result in results:
        assert isinstance(result, torch.Tensor) and result.tolist() == [4.0, 2.5]
    assert premultiplied(torch.ones(2), R.SUM) is None


def test_what_nccl_refuses_is_refused_with_the_reason() -> None:
    with pytest.raises(TypeError, match="PREMUL_SUM takes float16, bfloat16, float32 or float64"):
        premultiplied(torch.ones(2, dtype=torch.int32), dist._make_nccl_premul_sum(2.0))
    with pytest.raises(TypeError, match="AVG of a bool tensor has no meaning"):
        all_reduce_as_nccl(torch.ones(2, dtype=torch.bool), R.AVG, 2, lambda t, o: None)
    with pytest.raises(TypeError, match="of a complex tensor has no meaning"):
        all_reduce_as_nccl(torch.ones(2, dtype=torch.complex64), R.MAX, 2, lambda t, o: None)
