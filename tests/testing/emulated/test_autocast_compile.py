"""Autocast with CUDA's op lists on the emulated device, and torch.compile with aot_eager."""

from __future__ import annotations

import torch

from .worker import on_emulated


@on_emulated()
def test_autocast_runs_cudas_lower_precision_ops_in_the_chosen_dtype() -> None:
    a = torch.randn(4, 4, device="emu:0")
    for dtype in (torch.float16, torch.bfloat16):
        with torch.autocast("emu", dtype=dtype):
            assert torch.mm(a, a).dtype == dtype
            assert torch.nn.functional.linear(a, a).dtype == dtype


@on_emulated()
def test_autocast_runs_cudas_fp32_ops_in_float32() -> None:
    half = torch.randn(4, device="emu:0").half()
    with torch.autocast("emu", dtype=torch.float16):
        assert torch.exp(half).dtype == torch.float32
        assert torch.softmax(half, 0).dtype == torch.float32


@on_emulated()
def test_autocast_lists_its_supported_dtypes() -> None:
    assert torch.emu.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.emu.is_bf16_supported()
    assert torch.amp.is_autocast_available("emu")


@on_emulated()
def test_compile_with_aot_eager_gives_the_eager_result() -> None:
    def step(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * 2 + x.sum()

    x = torch.randn(8, 8, device="emu:0")
    compiled = torch.compile(step, backend="aot_eager")(x)
    assert compiled.device == torch.device("emu:0")
    assert torch.equal(compiled.cpu(), step(x).cpu())
