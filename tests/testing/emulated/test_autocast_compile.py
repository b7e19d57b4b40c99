"""Autocast with CUDA's op lists on the emulated device, and torch.compile with aot_eager."""

from __future__ import annotations

import pytest
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


@on_emulated()
def test_autocast_refuses_binary_cross_entropy_as_cudas_does() -> None:
    probabilities = torch.rand(2, 3, device="emu:0")
    targets = torch.rand(2, 3, device="emu:0")
    with torch.autocast("emu", dtype=torch.float16):
        with pytest.raises(
            RuntimeError, match=r"binary_cross_entropy and torch\.nn\.BCELoss are unsafe"
        ):
            torch.nn.functional.binary_cross_entropy(probabilities, targets)
        with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
            torch.nn.BCELoss()(probabilities, targets)


@on_emulated()
def test_binary_cross_entropy_runs_with_logits_under_autocast_and_outside_it() -> None:
    logits = torch.randn(2, 3, device="emu:0")
    targets = torch.rand(2, 3, device="emu:0")
    expected = torch.nn.functional.binary_cross_entropy_with_logits(logits.cpu(), targets.cpu())
    with torch.autocast("emu", dtype=torch.float16):
        fixed = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets)
        with torch.autocast("emu", enabled=False):
            outside = torch.nn.functional.binary_cross_entropy(torch.sigmoid(logits), targets)
    assert fixed.dtype == torch.float32
    torch.testing.assert_close(fixed.cpu(), expected)
    torch.testing.assert_close(outside.cpu(), expected)


@on_emulated()
def test_autocast_to_an_unsupported_dtype_warns_and_stays_off() -> None:
    a = torch.randn(4, 4, device="emu:0")
    only = r"emu Autocast only supports dtypes of torch\.float16"
    with pytest.warns(UserWarning, match=only), torch.autocast("emu", dtype=torch.float32):
        assert not torch.is_autocast_enabled("emu")
        assert torch.mm(a, a).dtype == torch.float32


@on_emulated()
def test_autocast_dtype_is_half_by_default_and_can_be_set() -> None:
    assert torch.get_autocast_dtype("emu") == torch.float16
    try:
        torch.set_autocast_dtype("emu", torch.bfloat16)
        assert torch.get_autocast_dtype("emu") == torch.bfloat16
    finally:
        torch.set_autocast_dtype("emu", torch.float16)
