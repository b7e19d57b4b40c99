"""Fixtures for the op tests: one compiled build per op, shared by the whole session."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def shared_extensions_dir(session_extensions_dir: Path) -> Iterator[Path]:
    """``TORCH_EXTENSIONS_DIR`` set to the session's op cache, so each op compiles at most once."""
    root = session_extensions_dir
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCH_EXTENSIONS_DIR", str(root))
        patch.delenv("ANYACCEL_CPU_SIMD", raising=False)
        yield root


def _run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with this environment (plus ``env``)."""
    full_env = {**os.environ, **(env or {})}
    src = str(Path(__file__).resolve().parents[2] / "src")
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, full_env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def run_python() -> Callable[..., subprocess.CompletedProcess[str]]:
    """A runner for Python snippets in a fresh interpreter that imports this checkout."""
    return _run_python
