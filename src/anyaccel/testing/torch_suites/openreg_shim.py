"""pytest plugin for OpenReg's test files: the emulated device as ``openreg``, a stand-in package.

Loaded with ``-p`` by ``openreg.run_openreg_tests`` in the child process of each file. The
files ``import torch_openreg`` for its side effect (registering the device); here that package
is an empty module, and the device is the emulated one, installed before collection.
"""

from __future__ import annotations

import os
import sys
import types

import pytest

__all__ = ["pytest_configure"]


def pytest_configure(config: pytest.Config) -> None:
    """Install the device named in ``ANYACCEL_OPENREG_SPEC`` and the ``torch_openreg`` stand-in."""
    from anyaccel.emulated.spec import parse_spec
    from anyaccel.testing.emulated import install
    from anyaccel.testing.torch_suites.openreg import SPEC_ENV

    spec = parse_spec(os.environ.get(SPEC_ENV, "openreg:2"))
    install(spec.device_type, spec.device_count, spec.memory_capacity)
    stand_in = types.ModuleType("torch_openreg", "anyaccel's stand-in: the emulated device")
    sys.modules.setdefault("torch_openreg", stand_in)
