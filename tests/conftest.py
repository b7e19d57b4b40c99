"""Shared fixtures: every test starts with no cached accelerator and no forced backend."""

from __future__ import annotations

import os
import re
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


#: Words in a skip's reason that mean "an extra the ``test`` extra does not install is missing".
#: A test skipped for one must carry the ``extras`` marker: the gate runs every test in the
#: newcomer's full run (``test`` extra only) and, beside it, only ``-m extras`` with the pinned
#: frameworks, so an unmarked one would run nowhere.
EXTRA_ONLY_WORDS = re.compile(
    r"(?<![a-z])(deepspeed|lightning|accelerate|transformers|matplotlib|check.jsonschema|mkdocs|mypy|ruff)(?![a-z])",
    re.IGNORECASE,
)
#: ... and words that say it is missing (a reason that only names one is not about that).
MISSING_WORDS = re.compile(
    r"not installed|could not import|no module named|not importable|missing|absent|"
    r"is not available",
    re.IGNORECASE,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the framework hand-over tests (``tests/integrations``) and DeepSpeed's as ``extras``."""
    integrations = Path(__file__).parent / "integrations"
    for item in items:
        if item.path.is_relative_to(integrations) or item.get_closest_marker("deepspeed"):
            item.add_marker(pytest.mark.extras)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Fail an unmarked test skipped for a missing extra: the gate would run it nowhere."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if not report.skipped or item.get_closest_marker("extras") is not None:
        return
    longrepr = report.longrepr
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
    if EXTRA_ONLY_WORDS.search(reason) and MISSING_WORDS.search(reason):
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} skipped for a missing extra ({reason}) but has no "
            "@pytest.mark.extras: mark it, so the gate's pinned job (pytest -m extras) runs it"
        )


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
