"""Which ``*.py`` files a check or a port covers: gitignore-style excludes, applied while walking.

Patterns follow ``.gitignore`` (``*``, ``**``, ``?``, ``[...]``, ``!`` to re-include, a
trailing ``/`` for directories only, a ``/`` inside anchoring to the base directory). Files
named explicitly are always taken, as ruff and flake8 do.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEFAULT_EXCLUDES", "IgnorePattern", "IgnoreRules", "iter_python_files"]

#: Never worth checking: tool caches, VCS and virtual-environment directories.
DEFAULT_EXCLUDES: tuple[str, ...] = (
    ".git/",
    ".hg/",
    ".svn/",
    ".venv/",
    "venv/",
    "__pycache__/",
    ".tox/",
    ".nox/",
    ".eggs/",
    "*.egg-info/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".pytest_cache/",
    "node_modules/",
)


@dataclass(frozen=True)
class IgnorePattern:
    """One compiled gitignore line."""

    text: str
    regex: re.Pattern[str]
    negated: bool
    dir_only: bool

    @classmethod
    def parse(cls, line: str) -> IgnorePattern | None:
        """The pattern on ``line``, or ``None`` for a blank line or a comment."""
        text = line.rstrip("\n").rstrip()
        if not text or text.startswith("#"):
            return None
        negated = text.startswith("!")
        if negated or text.startswith("\\"):  # "\!" and "\#" escape a leading ! or #
            text = text[1:]
        dir_only = text.endswith("/")
        body = text.rstrip("/")
        if not body:
            return None
        anchored = "/" in body
        body = body.lstrip("/")
        regex = _translate(body)
        if not anchored and not body.startswith("**"):
            regex = "(?:.*/)?" + regex
        return cls(line.strip(), re.compile(f"^{regex}$"), negated, dir_only)


def _translate(pattern: str) -> str:
    """A gitignore glob as a regex over ``/``-separated relative paths."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == n:
            out.append("/.*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 2)
            if end == -1:
                out.append(re.escape("["))
                i += 1
                continue
            inner = pattern[i + 1 : end]
            if inner.startswith("!"):
                inner = "^" + inner[1:]
            out.append("[" + inner.replace("\\", "\\\\") + "]")
            i = end + 1
        elif pattern[i] == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class IgnoreRules:
    """The patterns of one source (a ``.gitignore``, or the config's ``exclude``) and their base."""

    base: Path
    patterns: tuple[IgnorePattern, ...]

    @classmethod
    def from_lines(cls, base: Path, lines: Iterable[str]) -> IgnoreRules:
        """Rules from gitignore-style lines, relative to ``base``."""
        parsed = (IgnorePattern.parse(line) for line in lines)
        return cls(base, tuple(p for p in parsed if p is not None))

    def decide(self, path: Path, is_dir: bool) -> bool | None:
        """True if excluded, False if re-included by a ``!`` pattern, None if no pattern applies."""
        try:
            relative = path.relative_to(self.base).as_posix()
        except ValueError:
            return None
        verdict: bool | None = None
        for pattern in self.patterns:
            if pattern.dir_only and not is_dir:
                continue
            if pattern.regex.match(relative):
                verdict = not pattern.negated
        return verdict


def _excluded(path: Path, is_dir: bool, rules: Sequence[IgnoreRules]) -> bool:
    path = Path(os.path.abspath(path))
    verdict = False
    for rule_set in rules:  # later (deeper) rule sets override earlier ones, as in git
        decided = rule_set.decide(path, is_dir)
        if decided is not None:
            verdict = decided
    return verdict


def iter_python_files(
    paths: Iterable[Path], excludes: Sequence[IgnoreRules], respect_gitignore: bool = True
) -> Iterator[Path]:
    """Each ``*.py`` file under ``paths`` that no exclude (nor ``.gitignore``) rules out.

    Raises ``FileNotFoundError`` naming a path that does not exist.
    """
    for root in paths:
        if root.is_file():
            yield root
            continue
        if not root.is_dir():
            raise FileNotFoundError(f"{root}: no such file or directory")
        yield from _walk(root, list(excludes), respect_gitignore)


def _walk(top: Path, rules: list[IgnoreRules], respect_gitignore: bool) -> Iterator[Path]:
    active = [*rules, *_gitignores_above(top)] if respect_gitignore else rules
    stack: list[tuple[Path, list[IgnoreRules]]] = [(top, active)]
    while stack:
        directory, inherited = stack.pop()
        here = inherited
        gitignore = directory / ".gitignore"
        if respect_gitignore and gitignore.is_file():
            text = gitignore.read_text(encoding="utf-8", errors="replace")
            here = [*inherited, IgnoreRules.from_lines(directory, text.splitlines())]
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        subdirs = []
        for entry in entries:
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                if not _excluded(path, True, here):
                    subdirs.append((path, here))
            elif (
                entry.name.endswith(".py") and entry.is_file() and not _excluded(path, False, here)
            ):
                yield path
        stack.extend(reversed(subdirs))


def _gitignores_above(top: Path) -> list[IgnoreRules]:
    """``.gitignore`` files of the directories above ``top``, up to the repository root."""
    found: list[IgnoreRules] = []
    directory = top.absolute().parent
    for parent in [directory, *directory.parents]:
        gitignore = parent / ".gitignore"
        if gitignore.is_file():
            text = gitignore.read_text(encoding="utf-8", errors="replace")
            found.append(IgnoreRules.from_lines(parent, text.splitlines()))
        if (parent / ".git").exists():
            break
    found.reverse()
    return found
