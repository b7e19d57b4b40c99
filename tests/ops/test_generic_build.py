"""The portable (no ISA flags) build: compiled in a fresh process, numerically like torch."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

RunPython = Callable[..., subprocess.CompletedProcess[str]]


def test_generic_build_matches_torch_adam_and_converts_exactly(run_python: RunPython) -> None:
    result = run_python(
        """
        import torch
        from anyaccel.ops.adam import CPUAdam
        from anyaccel.ops.cpu import CPUAdamBuilder
        assert CPUAdamBuilder().load().simd_level() == "generic"
        torch.manual_seed(0)
        ours = torch.nn.Parameter(torch.randn(70_001))
        ref = torch.nn.Parameter(ours.detach().clone())
        copy = torch.empty_like(ours, dtype=torch.float16)
        opt_ours, opt_ref = CPUAdam([ours], lr=1e-2, weight_decay=0.1), torch.optim.Adam(
            [ref], lr=1e-2, weight_decay=0.1)
        for _ in range(100):
            grad = torch.randn_like(ours)
            ours.grad, ref.grad = grad, grad.clone()
            opt_ours.step(fp16_param_groups=[copy])
            opt_ref.step()
        torch.testing.assert_close(ours.detach(), ref.detach(), rtol=1e-5, atol=1e-6)
        assert torch.equal(copy, ours.detach().half())
        print("ok")
        """,
        env={"ANYACCEL_CPU_SIMD": "generic"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok"
