"""Shared fixtures: every test starts with no cached accelerator and no forced backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import anyaccel


@pytest.fixture(autouse=True)
def fresh_accelerator(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Forget the cached accelerator and unset DS_ACCELERATOR around each test."""
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    anyaccel.reset_accelerator()
    yield
    anyaccel.reset_accelerator()
