"""Shared fixtures: every test starts with no cached accelerator and no forced backend."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

import anyaccel
from anyaccel.ops import extensions_root

# Property tests draw the same examples on every run, so the gate is repeatable; set
# HYPOTHESIS_PROFILE=explore to search with fresh random examples (and more of them).
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(scope="session")
def session_extensions_dir() -> Path:
    """The op cache every test that builds shares: the user's own (``extensions_root()``).

    A warm cache (the gate's ``anyaccel ops --build all``, a user's earlier run) means the suite
    compiles nothing; a cold one builds each op once. ``ANYACCEL_TEST_EXTENSIONS_DIR`` points the
    suite elsewhere. Tests of the build machinery itself use ``tmp_path`` caches of their own.
    """
    configured = os.environ.get("ANYACCEL_TEST_EXTENSIONS_DIR")
    root = Path(configured) if configured else extensions_root()
    root.mkdir(parents=True, exist_ok=True)
    return root


@pytest.fixture(autouse=True)
def fresh_accelerator(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Forget the cached accelerator and unset DS_ACCELERATOR around each test."""
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    anyaccel.reset_accelerator()
    yield
    anyaccel.reset_accelerator()
