"""Which files a check covers: gitignore-style patterns, nested .gitignore files, explicit files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anyaccel.porting.config import CheckConfig
from anyaccel.porting.source_files import (
    IgnorePattern,
    IgnoreRules,
    PythonFile,
    iter_python_files,
)


def _tree(root: Path, *files: str) -> None:
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n")


def _found(root: Path, patterns: tuple[str, ...] = (), gitignore: bool = True) -> list[str]:
    rules = [*CheckConfig(root=root).exclude_rules(), IgnoreRules.from_lines(root, patterns)]
    found = iter_python_files([root], rules, gitignore)
    return sorted(f.path.relative_to(root).as_posix() for f in found)


@pytest.mark.parametrize(
    ("pattern", "path", "is_dir", "excluded"),
    [
        ("*.py", "a/b/c.py", False, True),
        ("build/", "pkg/build", True, True),
        ("build/", "pkg/build", False, None),
        ("/top.py", "top.py", False, True),
        ("/top.py", "sub/top.py", False, None),
        ("docs/*.py", "docs/conf.py", False, True),
        ("docs/*.py", "docs/api/x.py", False, None),
        ("**/gen/*.py", "a/b/gen/x.py", False, True),
        ("a/**/z.py", "a/z.py", False, True),
        ("a/**/z.py", "a/b/c/z.py", False, True),
        ("legacy/**", "legacy/x/y.py", False, True),
        ("test_?.py", "test_a.py", False, True),
        ("test_[ab].py", "test_c.py", False, None),
        ("test_[!ab].py", "test_c.py", False, True),
        ("\\#odd.py", "#odd.py", False, True),
    ],
)
def test_gitignore_pattern_semantics(
    pattern: str, path: str, is_dir: bool, excluded: bool | None, tmp_path: Path
) -> None:
    rules = IgnoreRules.from_lines(tmp_path, [pattern])
    assert rules.decide(tmp_path / path, is_dir) is excluded


def test_comments_and_blank_lines_are_not_patterns() -> None:
    assert IgnorePattern.parse("# comment") is None
    assert IgnorePattern.parse("   ") is None


def test_negation_re_includes_a_file(tmp_path: Path) -> None:
    _tree(tmp_path, "gen/a.py", "gen/keep.py", "main.py")
    assert _found(tmp_path, ("gen/*.py", "!gen/keep.py")) == ["gen/keep.py", "main.py"]


def test_nested_gitignore_files_apply_to_their_subtree(tmp_path: Path) -> None:
    _tree(tmp_path, "a/skip.py", "a/keep.py", "b/skip.py", "venv/lib.py", "x/__pycache__/c.py")
    (tmp_path / "a" / ".gitignore").write_text("skip.py\n")
    assert _found(tmp_path) == ["a/keep.py", "b/skip.py"]
    assert _found(tmp_path, gitignore=False) == ["a/keep.py", "a/skip.py", "b/skip.py"]


def test_gitignore_above_the_checked_directory_counts(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("generated/\n")
    _tree(tmp_path, "src/generated/g.py", "src/m.py")
    found = iter_python_files([tmp_path / "src"], [], True)
    assert [f.path.name for f in found] == ["m.py"]


def test_explicit_files_are_always_checked(tmp_path: Path) -> None:
    _tree(tmp_path, "gen/a.py")
    rules = [IgnoreRules.from_lines(tmp_path, ["gen/"])]
    found = list(iter_python_files([tmp_path / "gen" / "a.py"], rules))
    assert found == [PythonFile(tmp_path / "gen/a.py", None)]


def test_missing_path_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope"):
        list(iter_python_files([tmp_path / "nope"], []))


@given(st.text(max_size=30))
def test_any_pattern_line_parses_or_is_skipped(line: str) -> None:
    pattern = IgnorePattern.parse(line)
    if pattern is not None:
        pattern.regex.match("a/b.py")


def test_walk_problems_are_listed_and_the_walk_goes_on(tmp_path: Path) -> None:
    (tmp_path / "loop.py").symlink_to("loop.py")
    (tmp_path / "dangling.py").symlink_to("gone.py")
    (tmp_path / "m.py").write_text("x = 1\n")
    problems: list[str] = []
    found = list(iter_python_files([tmp_path / "nope", tmp_path], [], True, problems))
    assert found == [PythonFile(tmp_path / "m.py", tmp_path.resolve())]
    assert problems == [
        f"{tmp_path / 'nope'}: no such file or directory",
        f"{tmp_path / 'loop.py'}: cannot read: a symbolic link loop "
        "(the link points back at itself)",
    ]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_named_pipe_is_refused_never_opened_whether_named_or_walked(
    tmp_path: Path,
) -> None:
    _tree(tmp_path, "train.py")
    os.mkfifo(tmp_path / "pipe.py")
    problems: list[str] = []
    named = list(iter_python_files([tmp_path / "pipe.py"], [], True, problems))
    assert named == [] and problems == [
        f"{tmp_path / 'pipe.py'}: not a regular file (a named pipe); skipped, never opened: "
        "name a Python source file or a directory"
    ]
    walked: list[str] = []
    assert [f.path.name for f in iter_python_files([tmp_path], [], True, walked)] == ["train.py"]
    assert walked == [problems[0]]
