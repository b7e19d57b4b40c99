"""Builds say what, why and where before they start, and how long they took, on anyaccel.ops."""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from anyaccel.ops import builder as builder_module
from anyaccel.ops.builder import OpBuilder
from anyaccel.ops.jit import cache
from anyaccel.ops.jit.cache import build_reason
from anyaccel.ops.jit.plan import BuildPlan

RunPython = Callable[..., subprocess.CompletedProcess[str]]


class QuickBuilder(OpBuilder):
    """A builder whose compile step is replaced by the tests (nothing is compiled)."""

    NAME = "announced_op"

    def __init__(self, source: Path) -> None:
        super().__init__()
        self.source = source

    def sources(self) -> list[str]:
        return [str(self.source)]


@pytest.fixture
def quick_builder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> QuickBuilder:
    """A builder over a fresh cache whose 'compile' writes a stand-in library instantly."""
    source = tmp_path / "op.cpp"
    source.write_text("// v1\\n")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "cache"))

    def fake_compile(plan: BuildPlan, directory: str) -> ModuleType:
        (Path(directory) / f"{plan.extension_name}.so").write_bytes(b"not an ELF file")
        return ModuleType(plan.extension_name)

    monkeypatch.setattr(cache, "compile_extension", fake_compile)
    monkeypatch.setattr(builder_module, "_loaded", {})  # the in-memory cache ignores the root
    return QuickBuilder(source)


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "anyaccel.ops"]


def test_a_build_is_logged_before_it_starts_and_after_with_the_time(
    quick_builder: QuickBuilder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="anyaccel")
    quick_builder.load()
    before, after = _messages(caplog)
    plan = quick_builder.plan()
    assert before == (
        f"building op 'announced_op' (QuickBuilder): first use (nothing cached yet); this takes "
        f"a while once, then it is cached in {plan.build_directory}"
    )
    assert after.startswith("built op 'announced_op' in ") and after.endswith(" s")
    stamp = json.loads((Path(plan.build_directory) / "anyaccel-build.json").read_text())
    assert stamp["library_bytes"] == len(b"not an ELF file")


def test_a_changed_source_is_announced_as_a_cache_that_no_longer_matches(
    quick_builder: QuickBuilder, caplog: pytest.LogCaptureFixture
) -> None:
    quick_builder.load()
    old = quick_builder.plan().extension_name
    quick_builder.source.write_text("// v2\\n")
    caplog.set_level(logging.INFO, logger="anyaccel")
    caplog.clear()
    quick_builder.load()
    assert _messages(caplog)[0].startswith(
        f"building op 'announced_op' (QuickBuilder): the cached build ({old}) no longer matches"
    )


def test_a_cached_load_announces_nothing(
    quick_builder: QuickBuilder, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    quick_builder.load()
    builder_module._loaded.pop(quick_builder.plan().key)
    monkeypatch.setattr(cache, "import_extension", lambda plan, fd: ModuleType(plan.extension_name))
    caplog.set_level(logging.INFO, logger="anyaccel")
    caplog.clear()
    assert quick_builder.load().__name__ == quick_builder.plan().extension_name
    assert _messages(caplog) == []


def test_silenced_the_usual_way(
    quick_builder: QuickBuilder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    logging.getLogger("anyaccel").setLevel(logging.WARNING)
    try:
        quick_builder.load()
    finally:
        logging.getLogger("anyaccel").setLevel(logging.NOTSET)
    assert _messages(caplog) == []


def test_build_reason_without_any_cache_is_first_use(tmp_path: Path) -> None:
    plan = QuickBuilder(tmp_path / "x.cpp")
    (tmp_path / "x.cpp").write_text("")
    assert build_reason(plan.plan()) == "first use (nothing cached yet)"


ANNOUNCE = """
    import logging, sys
    {setup}
    from anyaccel.ops.jit.announce import announce
    announce("building op 'demo'")
"""


@pytest.mark.parametrize(
    ("setup", "shown"),
    [
        ("", 1),  # nothing configured: users still see it, on stderr
        ("logging.getLogger('anyaccel').setLevel(logging.WARNING)", 0),
        ("logging.getLogger('anyaccel.ops').setLevel(logging.ERROR)", 0),
        ("logging.basicConfig(level=logging.INFO)", 1),  # once, through the app's handler
        ("logging.basicConfig(level=logging.WARNING)", 0),  # the app chose warnings only
        ("logging.disable(logging.INFO)", 0),
    ],
)
def test_announcements_reach_stderr_unless_logging_says_otherwise(
    setup: str, shown: int, run_python: RunPython
) -> None:
    result = run_python(ANNOUNCE.format(setup=setup))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("building op 'demo'") == shown, result.stderr
