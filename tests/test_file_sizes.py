"""No source file over 600 lines: a file that outgrows it holds more than one job (issue 43)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 600
#: Where our code lives, and the suffixes that are code.
PLACES = ("src", "tests", "benchmarks", "tools", "examples")
SUFFIXES = {".py", ".cpp", ".h", ".cu"}
#: Inputs, not code of ours: the porting tools' corpora are other projects' scripts.
NOT_OURS = (ROOT / "tests" / "porting" / "corpus", ROOT / "tests" / "porting" / "public")


def source_files() -> list[Path]:
    """Every code file of ours under the places above."""
    found = []
    for place in PLACES:
        for path in (ROOT / place).rglob("*"):
            theirs = any(path.is_relative_to(other) for other in NOT_OURS)
            if path.suffix in SUFFIXES and path.is_file() and not theirs:
                found.append(path)
    return found


def test_the_walk_finds_the_code() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in source_files()}
    assert {"src/anyaccel/detection.py", "tests/test_file_sizes.py"} <= names
    assert any(name.endswith(".cpp") for name in names) and any(n.endswith(".h") for n in names)
    assert not any(name.startswith("tests/porting/corpus/") for name in names)


def test_no_source_file_is_over_600_lines() -> None:
    too_long = {
        path.relative_to(ROOT).as_posix(): lines
        for path in source_files()
        if (lines := len(path.read_text(encoding="utf-8", errors="replace").splitlines())) > LIMIT
    }
    assert not too_long, f"split these by job (at most {LIMIT} lines each): {too_long}"
