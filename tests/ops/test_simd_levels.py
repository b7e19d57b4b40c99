"""Every SIMD level this CPU can run, built in a fresh process: parity with torch, exact copies."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

from anyaccel.ops.cpu_features import cpu_features

RunPython = Callable[..., subprocess.CompletedProcess[str]]

CHECK = """
    import torch
    from anyaccel.ops.adam import CPUAdam
    from anyaccel.ops.cpu import CPUAdamBuilder
    assert CPUAdamBuilder().load().simd_level() == "{level}", CPUAdamBuilder().load().simd_level()
    torch.manual_seed(0)
    ours = torch.nn.Parameter(torch.randn(70_001))
    ref = torch.nn.Parameter(ours.detach().clone())
    opt_ours = CPUAdam([ours], lr=1e-2, weight_decay=0.1)
    opt_ref = torch.optim.Adam([ref], lr=1e-2, weight_decay=0.1)
    for _ in range(100):
        grad = torch.randn_like(ours)
        ours.grad, ref.grad = grad, grad.clone()
        opt_ours.step()
        opt_ref.step()
    torch.testing.assert_close(ours.detach(), ref.detach(), rtol=1e-5, atol=1e-6)

    special = [0.0, -0.0, 1e-40, -3e-39, 6e-8, 2e-5, 65504.0, 65520.0, 1e6, 3.4e38,
               float("inf"), float("-inf")]
    values = torch.cat([torch.randn(100_003) * 10, torch.tensor(special)])
    param = torch.nn.Parameter(values.clone())
    param.grad = torch.zeros_like(param)
    frozen = CPUAdam([param], lr=0.0)
    for offset in (0, 1):  # a 32-byte aligned copy (streaming stores) and a misaligned one
        for dtype in (torch.bfloat16, torch.float16):
            buffer = torch.empty(values.numel() + 1, dtype=dtype)
            copy = buffer[offset : offset + values.numel()]
            frozen.step(fp16_param_groups=[copy])
            expected = values.to(dtype).view(torch.int16)
            assert torch.equal(copy.view(torch.int16), expected), (dtype, offset)
    print("ok")
"""


def levels_to_check() -> list[str]:
    """The portable level, plus AVX2 on an AVX-512 CPU (the native level is tested in-process)."""
    levels = ["generic"]
    if cpu_features().best_simd() == "avx512":
        levels.append("avx2")
    return levels


@pytest.mark.parametrize("level", levels_to_check())
def test_level_matches_torch_and_converts_exactly(level: str, run_python: RunPython) -> None:
    result = run_python(CHECK.format(level=level), env={"ANYACCEL_CPU_SIMD": level})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok"
