"""Shared fixtures: every test starts with no cached accelerator and no forced backend."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

import anyaccel

# Property tests draw the same examples on every run, so the gate is repeatable; set
# HYPOTHESIS_PROFILE=explore to search with fresh random examples (and more of them).
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(autouse=True)
def fresh_accelerator(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Forget the cached accelerator and unset DS_ACCELERATOR around each test."""
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    anyaccel.reset_accelerator()
    yield
    anyaccel.reset_accelerator()
