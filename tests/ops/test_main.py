"""``python -m anyaccel.ops``: the capability table, dry-run plans and builds."""

from __future__ import annotations

import pytest

from anyaccel.ops.__main__ import main


def test_prints_the_capability_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--accelerator", "cpu"]) == 0
    assert "CPUAdamBuilder" in capsys.readouterr().out


def test_plan_prints_flags_without_building(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")
    assert main(["--accelerator", "cuda", "--plan", "FusedAdamBuilder"]) == 0
    assert "-gencode=arch=compute_80,code=sm_80" in capsys.readouterr().out


def test_build_loads_the_op(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--accelerator", "cpu", "--build", "CPUAdamBuilder"]) == 0
    assert "loaded from" in capsys.readouterr().out


def test_unknown_builder_and_unavailable_op_fail(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--accelerator", "cpu", "--plan", "NoSuchBuilder"]) == 2
    assert main(["--accelerator", "cpu", "--build", "FusedAdamBuilder"]) == 1
    assert "available on: cuda" in capsys.readouterr().err


def test_defaults_to_the_detected_accelerator(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    assert main([]) == 0
    assert "CPULionBuilder" in capsys.readouterr().out
