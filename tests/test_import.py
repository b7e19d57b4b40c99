"""Importing anyaccel is cheap and side-effect free: no vendor runtime, device or compiler."""

from __future__ import annotations

import subprocess
import sys

import anyaccel
from anyaccel.testing.simulated import simulate_cuda

PROBE = """
import sys, torch
before = set(sys.modules)
import anyaccel
anyaccel.get_accelerator, anyaccel.Accelerator, anyaccel.SUPPORTED_ACCELERATOR_LIST
after = set(sys.modules) - before
heavy = sorted(m for m in after if m.split('.')[0] in {
    'torch_npu', 'intel_extension_for_pytorch', 'intel_extension_for_deepspeed',
    'habana_frameworks', 'torch_mlu', 'torch_sdaa', 'torch_supa', 'torch_musa',
    'oneccl_bindings_for_pytorch', 'psutil', 'triton'} or m.startswith('torch._dynamo'))
print(heavy)
"""


def test_import_pulls_in_no_vendor_or_compile_modules() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "[]"


def test_bare_import_does_not_even_import_torch() -> None:
    code = "import sys, anyaccel; print('torch' in sys.modules, anyaccel.__version__)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.split() == ["False", anyaccel.__version__]


def test_unknown_attribute_is_an_attribute_error() -> None:
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'get_acclerator'"):
        anyaccel.get_acclerator  # noqa: B018
    assert "get_accelerator" in dir(anyaccel)


def test_import_and_detection_leave_the_device_uninitialised() -> None:
    with simulate_cuda(device_count=2) as sim:
        anyaccel.reset_accelerator()
        anyaccel.get_accelerator()
        anyaccel.detection_report()
        assert sim.initialized is False


def test_public_names_are_exported() -> None:
    for name in anyaccel.__all__:
        assert hasattr(anyaccel, name), name
