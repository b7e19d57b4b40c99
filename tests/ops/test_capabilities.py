"""capabilities(): every known op, whether it can be built here, and why not."""

from __future__ import annotations

import pytest

import anyaccel
from anyaccel.ops.capabilities import OpCapability, capabilities, format_capabilities
from anyaccel.ops.jit import toolchain


def by_builder(rows: list[OpCapability]) -> dict[str, OpCapability]:
    """Rows keyed by builder class name."""
    return {row.builder: row for row in rows}


def test_cpu_can_build_host_ops_and_says_where_fused_adam_lives() -> None:
    rows = by_builder(capabilities("cpu"))
    assert rows["CPUAdamBuilder"].buildable and rows["CPUAdamBuilder"].reason == ""
    assert rows["CPULionBuilder"].op == "cpu_lion"
    fused = rows["FusedAdamBuilder"]
    assert not fused.buildable and "available on: cuda" in fused.reason


def test_cuda_without_a_cuda_torch_says_so() -> None:
    import torch

    if torch.version.cuda is not None:
        pytest.skip("this torch has CUDA")
    fused = by_builder(capabilities("cuda"))["FusedAdamBuilder"]
    assert not fused.buildable and "built without CUDA" in fused.reason


def test_missing_ninja_makes_every_op_unbuildable_with_the_remedy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(toolchain, "find_ninja", lambda: None)
    rows = by_builder(capabilities("cpu"))
    assert "pip install ninja" in rows["CPUAdamBuilder"].reason


def test_an_accelerator_object_gives_the_rows_of_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    rows = capabilities(anyaccel.get_accelerator())
    assert rows and all(row.accelerator == "cpu" for row in rows)
    assert rows == capabilities("cpu")


def test_no_accelerator_is_a_type_error_naming_the_fix() -> None:
    with pytest.raises(TypeError, match=r"pass anyaccel\.get_accelerator\(\) or a name"):
        capabilities(None)  # type: ignore[arg-type]


def test_format_capabilities_is_a_table() -> None:
    text = format_capabilities(capabilities("cpu"))
    header, *lines = text.splitlines()
    assert header.split()[:3] == ["builder", "op", "buildable"]
    assert any(line.startswith("CPUAdamBuilder") and " yes" in line for line in lines)
