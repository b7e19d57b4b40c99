"""Compiling: the compiler's first errors in the message, the full output in the build log."""

from __future__ import annotations

from pathlib import Path

import pytest

from anyaccel.ops.errors import OpBuildError
from anyaccel.ops.jit.compiler import first_error_lines
from anyaccel.ops.jit.plan import is_built

from ..test_builder import BROKEN_SOURCE, tmp_builder


def test_first_error_lines_picks_the_compiler_error() -> None:
    output = "ninja: build\nFAILED: a.o\nx.cpp:3:1: error: bad thing\n  3 | code\n    ^\n"
    assert first_error_lines(output)[0] == "x.cpp:3:1: error: bad thing"
    assert first_error_lines("no match here\nlast line") == ["no match here", "last line"]


def test_compile_error_shows_the_first_compiler_errors_and_the_log_path(tmp_path: Path) -> None:
    broken = tmp_builder(tmp_path, BROKEN_SOURCE, name="broken_op")
    with pytest.raises(OpBuildError) as caught:
        broken.load()
    message = str(caught.value)
    assert "undefined_symbol_here" in message and "error" in message
    log_path = broken.plan().log_path
    assert f"full log: {log_path}" in message
    assert "undefined_symbol_here" in Path(log_path).read_text()
    assert not is_built(broken.plan())


def test_a_second_load_after_a_failed_build_says_the_build_failed(tmp_path: Path) -> None:
    """torch skips a build it already tried in this process; that is no 'library does not load'."""
    broken = tmp_builder(tmp_path, BROKEN_SOURCE, name="broken_twice_op")
    with pytest.raises(OpBuildError):
        broken.load()
    with pytest.raises(OpBuildError) as caught:
        broken.load()
    message = str(caught.value)
    assert "broken_twice_op" in message
    assert "failed" in message and "does not load" not in message
