"""Fixtures for the simulation tests: a snapshot of everything a simulation may patch."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import pytest
import torch

from anyaccel.testing.simulated.patching import AUTOLOAD_ENV

#: Device attributes some simulation attaches to ``torch``.
_DEVICE_ATTRIBUTES = ("cuda", "npu", "xpu", "hpu", "mps", "mlu", "sdaa", "supa", "musa")
#: ``sys.modules`` names a simulation may install (vendor packages, ``torch.<device>``).
_INSTALLED_PREFIXES = (
    "torch_", "habana_frameworks", "intel_extension_for_", "anyaccel_simulated",
    *(f"torch.{name}" for name in _DEVICE_ATTRIBUTES),
)  # fmt: skip


def _snapshot() -> tuple[object, ...]:
    return (
        tuple(getattr(torch, name, None) for name in _DEVICE_ATTRIBUTES),
        torch.__version__,
        torch.version.cuda,
        torch.version.hip,
        torch.backends.cuda.is_built,
        torch.backends.mps.is_available,
        {n: m for n, m in sys.modules.items() if n.startswith(_INSTALLED_PREFIXES)},
        tuple(sys.meta_path),
        os.environ.get(AUTOLOAD_ENV),
    )


@pytest.fixture
def interpreter_state() -> Callable[[], tuple[object, ...]]:
    """A function returning what simulations patch: torch, sys.modules, meta path, env."""
    return _snapshot
