"""The kernel's reductions at their edges: NaN, signed zeros and infinities in MIN and MAX (as
torch.minimum/maximum fold them), and AVG as the exact mean, in all_reduce and reduce_scatter."""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType

import pytest
import torch

from .kernel_ranks import communicators, dtype_code, load_kernel_or_skip, on_every_rank, op_code

pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs Linux memfd")


@pytest.fixture(scope="module")
def shm() -> ModuleType:
    return load_kernel_or_skip()


# --- NaN, signed zeros and infinities in MIN/MAX; AVG as the exact mean -----------------------
FLOATS = [torch.float32, torch.bfloat16, torch.float16]


def special_values(world_size: int, rank: int, dtype: torch.dtype) -> torch.Tensor:
    """Column ``j < world_size`` has a NaN on rank ``j`` only; then NaN on every rank, and
    signed zeros and infinities in both orders (a fold of torch.minimum in rank order is the
    reference for each)."""
    nan, inf = float("nan"), float("inf")
    row = [nan if j == rank else float(j + rank + 1) for j in range(world_size)]
    row += [nan, -0.0 if rank % 2 else 0.0, 0.0 if rank % 2 else -0.0, inf, -inf]
    row += [inf if rank == world_size - 1 else 1.0, -inf if rank == 0 else -1.0]
    return torch.tensor(row, dtype=dtype)


def fold(inputs: list[torch.Tensor], op: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
         ) -> torch.Tensor:  # fmt: skip
    result = inputs[0]
    for tensor in inputs[1:]:
        result = op(result, tensor)
    return result


def same_floats(ours: torch.Tensor, theirs: torch.Tensor) -> bool:
    """Equal values, NaN where NaN (of either sign), and the same sign on zeros."""
    numbers = ~theirs.isnan()
    return (
        ours.dtype == theirs.dtype
        and torch.equal(ours.isnan(), theirs.isnan())
        and torch.equal(torch.nan_to_num(ours), torch.nan_to_num(theirs))
        and torch.equal(torch.signbit(ours) & numbers, torch.signbit(theirs) & numbers)
    )


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("name", ["min", "max"])
def test_a_nan_on_any_rank_wins_min_and_max_as_torch_minimum_and_maximum(
    shm: ModuleType, name: str, world_size: int, dtype: torch.dtype
) -> None:
    op, reference = {"min": ("MIN", torch.minimum), "max": ("MAX", torch.maximum)}[name]
    code = op_code(op)
    inputs = [special_values(world_size, r, dtype) for r in range(world_size)]
    expected = fold(inputs, reference)
    assert expected[:world_size].isnan().all()  # the reference itself lets every NaN win
    comms = communicators(shm, world_size)
    outputs = [t.clone() for t in inputs]
    numel = outputs[0].numel()
    on_every_rank(world_size, lambda r: comms[r].all_reduce(
        outputs[r].data_ptr(), numel, dtype_code(dtype), code, 30.0, 1))  # fmt: skip
    for rank, out in enumerate(outputs):
        assert same_floats(out, expected), (rank, out.tolist(), expected.tolist())
    # reduce_scatter: every rank's whole row as its part for each rank
    comms = communicators(shm, world_size)
    full = [t.repeat(world_size) for t in inputs]
    outs = [torch.full((numel,), 7.0, dtype=dtype) for _ in range(world_size)]
    on_every_rank(
        world_size,
        lambda r: comms[r].reduce_scatter(
            full[r].data_ptr(), outs[r].data_ptr(), numel, dtype_code(dtype), code, 30.0, 1
        ),
    )
    for rank, out in enumerate(outs):
        assert same_floats(out, expected), (rank, out.tolist(), expected.tolist())


def exact_mean(inputs: list[torch.Tensor]) -> torch.Tensor:
    """The mean over ranks, computed in float64 (exact for these inputs), rounded once."""
    return (torch.stack(inputs).double().sum(0) / len(inputs)).to(inputs[0].dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_avg_is_the_exact_mean_even_where_the_sum_overflows(
    shm: ModuleType, world_size: int, dtype: torch.dtype
) -> None:
    big = {torch.float16: [40000.0, 60000.0, -50000.0], torch.bfloat16: [3.0e38, -3.0e38, 2.0e38],
           torch.float32: [3.0e38, -3.0e38, 2.0e38]}[dtype]  # fmt: skip
    gen = torch.Generator().manual_seed(world_size)
    inputs = [
        torch.cat([torch.tensor(big), (torch.randn(5000, generator=gen) * 100)]).to(dtype)
        for _ in range(world_size)
    ]
    expected = exact_mean(inputs)
    assert torch.isfinite(expected).all() and expected[0].item() == inputs[0][0].item()
    comms = communicators(shm, world_size)
    outputs = [t.clone() for t in inputs]
    numel = outputs[0].numel()
    on_every_rank(world_size, lambda r: comms[r].all_reduce(
        outputs[r].data_ptr(), numel, dtype_code(dtype), op_code("AVG"), 30.0, 1))  # fmt: skip
    for out in outputs:
        assert torch.equal(out, expected)
    comms = communicators(shm, world_size)
    full = [t.repeat(world_size) for t in inputs]
    outs = [torch.empty(numel, dtype=dtype) for _ in range(world_size)]
    on_every_rank(
        world_size,
        lambda r: comms[r].reduce_scatter(
            full[r].data_ptr(),
            outs[r].data_ptr(),
            numel,
            dtype_code(dtype),
            op_code("AVG"),
            30.0,
            1,
        ),
    )
    for out in outs:
        assert torch.equal(out, expected)
