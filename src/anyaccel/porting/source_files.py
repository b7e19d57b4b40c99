"""Which ``*.py`` files a check or a port covers: gitignore-style excludes, applied while walking.

Patterns follow ``.gitignore`` (``*``, ``**``, ``?``, ``[...]``, ``!`` to re-include, a
trailing ``/`` for directories only, a ``/`` inside anchoring to the base directory). Files
named explicitly are always taken, as ruff and flake8 do.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
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
    paths: Iterable[Path],
    excludes: Sequence[IgnoreRules],
    respect_gitignore: bool = True,
    problems: list[str] | None = None,
) -> Iterator[Path]:
    """Each ``*.py`` file under ``paths`` that no exclude (nor ``.gitignore``) rules out.

    What cannot be walked (a symlink loop, a directory without permission, a path that
    vanished, a named pipe or device named as a path) is appended to ``problems`` as
    ``"path: why"`` and the walk goes on; the walk itself takes regular files only. Without
    a ``problems`` list, a missing path raises ``FileNotFoundError`` naming it, and the
    other problems are skipped silently.
    """
    report = problems.append if problems is not None else (lambda _: None)
    for root in paths:
        try:
            root_stat = root.stat()
        except OSError as error:
            if problems is None and isinstance(error, FileNotFoundError):
                raise FileNotFoundError(f"{root}: no such file or directory") from None
            missing = isinstance(error, FileNotFoundError)
            report(f"{root}: no such file or directory" if missing else f"{root}: {_why(error)}")
            continue
        if stat.S_ISDIR(root_stat.st_mode):
            yield from _walk(root, list(excludes), respect_gitignore, report)
        elif stat.S_ISREG(root_stat.st_mode):
            yield root
        else:  # reading a named pipe would wait for a writer; a device never ends
            report(
                f"{root}: not a regular file ({_special_kind(root_stat.st_mode)}); "
                "name a Python source file or a directory"
            )


def _special_kind(mode: int) -> str:
    """What a file that is neither a directory nor a regular file is, in words."""
    kinds = (
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((word for test, word in kinds if test(mode)), "a special file")


def _why(error: OSError) -> str:
    """An ``OSError`` as a short reason (ELOOP says "a symlink loop")."""
    if error.errno == errno.ELOOP:
        return "cannot read: a symbolic link loop (the link points back at itself)"
    if isinstance(error, FileNotFoundError):
        return "no such file or directory (it may have been removed during the run)"
    return f"cannot read: {error.strerror or error}"


def _read_gitignore(directory: Path, report: Callable[[str], None]) -> IgnoreRules | None:
    gitignore = directory / ".gitignore"
    try:
        text = gitignore.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno in (errno.EISDIR, errno.ENOTDIR):
            return None
        report(f"{gitignore}: {_why(error)}; its patterns are not applied")
        return None
    return IgnoreRules.from_lines(directory, text.splitlines())


def _walk(
    top: Path, rules: list[IgnoreRules], respect_gitignore: bool, report: Callable[[str], None]
) -> Iterator[Path]:
    active = [*rules, *_gitignores_above(top)] if respect_gitignore else rules
    stack: list[tuple[Path, list[IgnoreRules]]] = [(top, active)]
    while stack:
        directory, inherited = stack.pop()
        here = inherited
        if respect_gitignore:
            found = _read_gitignore(directory, report)
            if found is not None:
                here = [*inherited, found]
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as error:
            report(f"{directory}: {_why(error)}")
            continue
        subdirs = []
        for entry in entries:
            path = Path(entry.path)
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_file = not is_dir and entry.name.endswith(".py") and entry.is_file()
            except OSError as error:  # a symlink loop, a file removed meanwhile
                report(f"{path}: {_why(error)}")
                continue
            if is_dir:
                if not _excluded(path, True, here):
                    subdirs.append((path, here))
            elif entry.name.endswith(".py") and not is_file and entry.is_symlink():
                _report_link(path, here, report)
            elif is_file and not _excluded(path, False, here):
                yield path
        stack.extend(reversed(subdirs))


def _report_link(path: Path, rules: Sequence[IgnoreRules], report: Callable[[str], None]) -> None:
    """A ``*.py`` symlink that leads nowhere: a loop is reported, a dangling link is skipped."""
    if _excluded(path, False, rules):
        return
    try:
        path.stat()
    except OSError as error:
        if error.errno == errno.ELOOP:
            report(f"{path}: {_why(error)}")


def _gitignores_above(top: Path) -> list[IgnoreRules]:
    """``.gitignore`` files of the directories above ``top``, up to the repository root."""
    found: list[IgnoreRules] = []
    directory = top.absolute().parent
    for parent in [directory, *directory.parents]:
        rules = _read_gitignore(parent, lambda _: None)
        if rules is not None:
            found.append(rules)
        if (parent / ".git").exists():
            break
    found.reverse()
    return found
