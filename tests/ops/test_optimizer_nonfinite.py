"""NaN and +/-Inf gradients reach the parameters exactly where the reference puts them."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from .optim_reference import PAIRS
from .test_simd_levels import levels_to_check

RunPython = Callable[..., subprocess.CompletedProcess[str]]
BAD_VALUES = {"nan": float("nan"), "+inf": float("inf"), "-inf": float("-inf")}


def run_with_bad_gradient(name: str, bad: float, dtype: torch.dtype = torch.float32) -> None:
    """One step with ``bad`` at one element, then 3 clean steps; ours against the reference."""
    torch.manual_seed(0)
    shapes = [(40_000,), (5, 7)]  # one past the threading threshold's first chunk, one tiny
    ours = [torch.nn.Parameter(torch.randn(s).to(dtype)) for s in shapes]
    theirs = [torch.nn.Parameter(p.detach().clone().float()) for p in ours]
    mine, reference = PAIRS[name][0](ours), PAIRS[name][1](theirs)
    for step in range(4):
        for p, q in zip(ours, theirs, strict=True):
            grad = torch.randn(p.shape)
            if step == 0:
                grad.view(-1)[3] = bad
            p.grad, q.grad = grad.to(dtype), grad.to(dtype).float()
        mine.step()
        reference.step()
        if dtype != torch.float32:
            for q in theirs:
                q.data = q.data.to(dtype).float()
    for p, q in zip(ours, theirs, strict=True):
        got, want = p.detach().float(), q.detach()
        assert torch.equal(got.isnan(), want.isnan()), (name, bad, "NaN positions differ")
        assert torch.equal(got.isinf(), want.isinf()), (name, bad, "Inf positions differ")
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("bad", list(BAD_VALUES))
@pytest.mark.parametrize("name", list(PAIRS))
def test_a_non_finite_gradient_element_matches_the_reference(name: str, bad: str) -> None:
    run_with_bad_gradient(name, BAD_VALUES[bad])


def test_one_nan_gradient_does_not_freeze_lion() -> None:
    param = torch.nn.Parameter(torch.zeros(3))
    optimizer = PAIRS["CPULion"][0]([param])
    param.grad = torch.tensor([float("nan"), 1.0, 1.0])
    optimizer.step()
    assert param[0].isnan() and torch.all(param[1:] < 0)


LEVEL_CHECK = """
    import sys
    sys.path.insert(0, {tests!r})
    from anyaccel.ops.cpu import CPUAdamBuilder, CPULionBuilder, CPUAdagradBuilder
    for builder in (CPUAdamBuilder, CPULionBuilder, CPUAdagradBuilder):
        assert builder().load().simd_level() == "{level}"
    from ops.optim_reference import PAIRS
    from ops.test_optimizer_nonfinite import BAD_VALUES, run_with_bad_gradient
    for name in PAIRS:
        for bad in BAD_VALUES.values():
            run_with_bad_gradient(name, bad)
    print("ok")
"""


@pytest.mark.parametrize("level", levels_to_check())
def test_non_finite_gradients_at_every_simd_level(level: str, run_python: RunPython) -> None:
    tests = str(Path(__file__).resolve().parents[1])
    result = run_python(
        LEVEL_CHECK.format(tests=tests, level=level), env={"ANYACCEL_CPU_SIMD": level}
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
