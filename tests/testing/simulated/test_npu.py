"""torch_npu: the runtime with NPUs, and an install whose import fails without CANN."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable

import pytest
import torch

from anyaccel.testing.simulated import simulate_npu, simulate_npu_without_cann
from anyaccel.testing.simulated.patching import AUTOLOAD_ENV


def test_torch_npu_attaches_torch_npu_and_is_undone(
    interpreter_state: Callable[[], object],
) -> None:
    before = interpreter_state()
    with simulate_npu(device_count=2) as module:
        assert getattr(torch, "npu") is module  # noqa: B009
        assert sys.modules["torch_npu"].npu is module and sys.modules["torch_npu.npu"] is module
        assert module.get_device_capability() is None
        assert module.npurt().npuHostRegister(64, 8, 0) == 0
        assert hasattr(module, "NPUGraph") and hasattr(module, "mstx")
    assert interpreter_state() == before


def test_without_cann_the_import_switches_autoload_off_then_fails(
    interpreter_state: Callable[[], object],
) -> None:
    before = interpreter_state()
    with simulate_npu_without_cann():
        with pytest.raises(ImportError, match=r"libhccl\.so"):
            importlib.import_module("torch_npu")
        assert os.environ[AUTOLOAD_ENV] == "0"
    assert interpreter_state() == before


def test_an_old_release_exits_on_import(capsys: pytest.CaptureFixture[str]) -> None:
    with simulate_npu_without_cann(exit_on_import=True), pytest.raises(SystemExit):
        importlib.import_module("torch_npu")
    assert "source set_env.sh" in capsys.readouterr().out
