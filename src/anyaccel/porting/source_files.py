"""Which ``*.py`` files a check or a port covers: gitignore-style excludes, applied while walking.

Patterns follow ``.gitignore`` (``*``, ``**``, ``?``, ``[...]``, ``!`` to re-include, a
trailing ``/`` for directories only, a ``/`` inside anchoring to the base directory). Files
named explicitly are always taken, as ruff and flake8 do.

The walk takes regular files only, judged after following symlinks, and only those whose
real location stays inside the directory it was given: a link out of the tree, a named pipe,
a device or a kernel pseudo-file is reported (``refusal`` says why) and never opened.
Directory symlinks are not followed.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "DEFAULT_EXCLUDES",
    "FileIdentity",
    "IgnorePattern",
    "IgnoreRules",
    "PythonFile",
    "iter_python_files",
    "refusal",
]

#: Kernel pseudo-filesystems: their "regular" files report size 0 and may never end
#: (``/proc/kmsg`` waits for the next kernel message).
PSEUDO_FILESYSTEMS: tuple[Path, ...] = (Path("/proc"), Path("/sys"))

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


class FileIdentity(NamedTuple):
    """Which file a path named, as it was then: device, inode, size and modification time.

    Size and time tell a file apart from one created in its place that got the freed inode.
    """

    device: int
    inode: int
    size: int
    modified_ns: int

    @classmethod
    def of(cls, result: os.stat_result) -> FileIdentity:
        """The identity in a ``stat``/``fstat`` result."""
        return cls(result.st_dev, result.st_ino, result.st_size, result.st_mtime_ns)


class PythonFile(NamedTuple):
    """A file the walk found, and the real directory it must stay in (None: named explicitly)."""

    path: Path
    root: Path | None


def refusal(path: Path, root: Path | None) -> str | None:
    """Why ``path`` must not be opened, or None for a regular file (inside ``root``, if given).

    Symlinks are followed first: a loop, a link whose target leaves ``root`` (the real path of
    the directory being walked), a target that is not a regular file or that lives in
    ``/proc`` or ``/sys`` is refused. Raises ``FileNotFoundError`` when nothing is there.
    """
    try:
        real = Path(os.path.realpath(path, strict=True))
        result = real.stat()
    except FileNotFoundError:
        raise
    except OSError as error:
        return _why(error)
    behind = f" behind the symbolic link to {real}" if os.path.islink(path) else ""
    if root is not None and not real.is_relative_to(root):
        return (
            f"skipped, not read and not written: a symbolic link to {real}, outside {root} "
            "(the tree given); check or port that file where it lives, or --exclude the link"
        )
    if not stat.S_ISREG(result.st_mode):
        return (
            f"not a regular file ({_special_kind(result.st_mode)}{behind}); skipped, "
            "never opened: name a Python source file or a directory"
        )
    pseudo = next((fs for fs in PSEUDO_FILESYSTEMS if real.is_relative_to(fs)), None)
    if pseudo is not None:
        return (
            f"a kernel pseudo-file under {pseudo}{behind} (it may never end); skipped, never "
            "opened: name a Python source file"
        )
    return None


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
) -> Iterator[PythonFile]:
    """Each ``*.py`` file under ``paths`` that no exclude (nor ``.gitignore``) rules out.

    What cannot be walked or is refused (a symlink loop, a directory without permission, a
    link out of the directory given, a named pipe, a device, a ``/proc`` file) is appended to
    ``problems`` as ``"path: why"`` and the walk goes on; a dangling link or a file removed
    meanwhile is passed over. A file reached twice (a link to a file of the tree) is yielded
    once. Without a ``problems`` list, a missing path raises ``FileNotFoundError`` naming it,
    and the other problems are skipped silently.
    """
    report = problems.append if problems is not None else (lambda _: None)
    seen: set[FileIdentity] = set()
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
            for found in _walk(root, list(excludes), respect_gitignore, report):
                if _first_time(found, seen):
                    yield found
            continue
        try:  # a file named explicitly may live anywhere, but must be a regular file
            problem = refusal(root, None)
        except FileNotFoundError:
            problem = _why(FileNotFoundError())
        if problem is not None:
            report(f"{root}: {problem}")
        elif _first_time(PythonFile(root, None), seen):
            yield PythonFile(root, None)


def _first_time(found: PythonFile, seen: set[FileIdentity]) -> bool:
    """Whether this file (by device and inode) was not yielded before; it is now marked seen."""
    try:
        identity = FileIdentity.of(found.path.stat())
    except OSError:
        return True  # the read names the problem
    if identity in seen:
        return False
    seen.add(identity)
    return True


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
) -> Iterator[PythonFile]:
    root = Path(os.path.realpath(top))
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
            try:  # a directory symlink is not followed: it is not a directory here
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError as error:  # a file removed meanwhile
                report(f"{path}: {_why(error)}")
                continue
            if is_dir:
                if not _excluded(path, True, here):
                    subdirs.append((path, here))
                continue
            if not entry.name.endswith(".py") or _excluded(path, False, here):
                continue
            if entry.is_file(follow_symlinks=False):  # the common case: no link to follow
                yield PythonFile(path, root)
                continue
            try:
                problem = refusal(path, root)
            except FileNotFoundError:  # a dangling link, a file removed meanwhile
                continue
            if problem is None:
                yield PythonFile(path, root)
            else:
                report(f"{path}: {problem}")
        stack.extend(reversed(subdirs))


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
