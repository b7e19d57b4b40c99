"""The cache's trust rule: anyaccel builds in and loads only what no other user could have written.

Trusted owners are the running user and root (who can change any file the process loads
anyway); nothing used may be writable by group or others, and no symbolic link is followed
inside the cache. Each directory and file is checked through the descriptor it is then used
by (opened with ``O_NOFOLLOW``, checked with ``fstat``), so a swap between check and use cannot
redirect it. A root that others may write (``/tmp``, a sticky cluster scratch) only holds a
private directory per user, ``anyaccel-<uid>``, made mode 0700; the other directories anyaccel
makes are 0755 (less what the umask removes): readable by all, so that what root built loads
for every user.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import stat
from collections.abc import Iterator
from pathlib import Path

from anyaccel.ops.errors import OpError, UntrustedCacheError
from anyaccel.ops.jit.announce import logger
from anyaccel.ops.jit.plan import EXTENSIONS_DIR_ENV

#: Permission bits that let someone other than the owner change a directory's entries or a file.
WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
#: The mode of the running user's private directory in a root others may write, and of a
#: directory of ours repaired because others could write it.
PRIVATE_MODE = 0o700
#: The mode of the other directories anyaccel makes for the cache (before the umask): only
#: the owner writes, everyone may read, so a cache built by root (a container image's, a
#: shared software tree) loads for every user; loading needs no write.
READABLE_MODE = 0o755

_NO_LINK = os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | _NO_LINK
_OPEN_TO_READ = os.O_RDONLY | os.O_NONBLOCK | _NO_LINK  # a planted FIFO must not block the open


class WritableByOthers(OpError):
    """One of our own cached files others could have changed: rebuild it, never load it."""


def trusted_uids() -> frozenset[int]:
    """Who may own what the cache uses: the running (effective) user and root."""
    return frozenset({os.geteuid(), 0})


def private_directory_name() -> str:
    """The running user's own directory inside a root that others may write."""
    return f"anyaccel-{os.geteuid()}"


def describe(status: os.stat_result) -> str:
    """Who owns a file and its mode, as a refusal names them."""
    try:
        name = pwd.getpwuid(status.st_uid).pw_name
    except KeyError:
        name = "no such user"
    return f"owned by uid {status.st_uid} ({name}), mode {stat.S_IMODE(status.st_mode):04o}"


def refusal(path: str | Path, what: str, reason: str) -> UntrustedCacheError:
    """The error for an untrusted ``path``: what it is, why, and the fix."""
    return UntrustedCacheError(
        f"refusing the op cache's {what} {path}: {reason}, so it could hold another user's "
        f"code and anyaccel neither builds in it nor loads from it. Remove it if you did not "
        f"make it, or point {EXTENSIONS_DIR_ENV} at a directory only you can write, e.g. "
        f"`export {EXTENSIONS_DIR_ENV}=$HOME/.cache/torch_extensions`",
        path=str(path),
    )


def _refuse_planted(
    name: str, dir_fd: int | None, display: str | Path, what: str, exc: OSError
) -> None:
    """Raise the refusal for a link or another user's file where a directory was expected."""
    try:
        status = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return
    if stat.S_ISLNK(status.st_mode):
        raise refusal(display, what, f"it is a symbolic link ({describe(status)})") from exc
    if status.st_uid not in trusted_uids():
        raise refusal(display, what, f"another user made it a file ({describe(status)})") from exc


def build_home(root: Path) -> Path:
    """Where builds go under ``root``: itself when no one else may write it, else the running
    user's private ``root/anyaccel-<uid>`` (a path only; nothing is created or checked)."""
    try:
        status = os.stat(root)
    except OSError:
        return root
    if status.st_mode & WRITABLE_BY_OTHERS:
        return root / private_directory_name()
    return root


def open_home(root: Path, *, create: bool) -> int:
    """A descriptor of the verified directory builds go in under ``root`` (see ``build_home``).

    ``root`` may be reached through links the user configured, but must belong to the running
    user or root, and so must every directory and link on its path (``check_path_to``);
    ``create`` makes what is missing. Raises ``UntrustedCacheError`` for a root or
    private directory another user could write, ``OSError`` when one is missing or unusable.
    """
    check_path_to(root, create=create)
    with contextlib.suppress(OSError):
        link = os.lstat(root)
        if stat.S_ISLNK(link.st_mode) and link.st_uid not in trusted_uids():
            raise refusal(root, "root", f"it is a symbolic link {describe(link)}")
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        status = os.fstat(root_fd)
        if status.st_uid not in trusted_uids():
            raise refusal(root, "root", f"it belongs to another user ({describe(status)})")
        if not status.st_mode & WRITABLE_BY_OTHERS:
            return os.dup(root_fd)
        return open_directory(
            private_directory_name(),
            dir_fd=root_fd,
            display=root / private_directory_name(),
            what="private directory",
            create=create,
            mode=PRIVATE_MODE,
        )
    finally:
        os.close(root_fd)


def check_path_to(root: Path, *, create: bool) -> None:
    """Refuse a ``root`` whose path another user could redirect; ``create`` makes what is missing.

    Every directory above ``root``, as named and as resolved, must belong to the running user
    or root and, if others may write it, be sticky; every link on the way must be theirs too.
    Otherwise its owner could point the cache (and what is created for it) anywhere. Missing
    directories are made one at a time (0755), each checked as soon as it exists.
    """
    absolute = Path(os.path.abspath(root))
    for prefix in [*reversed(absolute.parents), absolute]:
        try:
            status = os.lstat(prefix)
        except FileNotFoundError:
            if not create:
                return
            with contextlib.suppress(FileExistsError):  # made meanwhile: checked below
                os.mkdir(prefix, READABLE_MODE)
            status = os.lstat(prefix)
        if prefix == absolute:
            break  # the root itself: checked through its descriptor by open_home
        _check_on_path(root, prefix, status)
    resolved = Path(os.path.realpath(absolute.parent))
    for prefix in [*reversed(resolved.parents), resolved]:
        _check_on_path(root, prefix, os.stat(prefix))


def _check_on_path(root: Path, prefix: Path, status: os.stat_result) -> None:
    """Refuse ``prefix`` above ``root`` when another user could change what it leads to."""
    if stat.S_ISLNK(status.st_mode):
        if status.st_uid not in trusted_uids():
            reason = f"{prefix} on its path is a symbolic link {describe(status)}"
            raise refusal(root, "root", reason)
        return
    if status.st_uid not in trusted_uids():
        raise refusal(
            root, "root", f"{prefix} on its path belongs to another user ({describe(status)})"
        )
    if status.st_mode & WRITABLE_BY_OTHERS and not status.st_mode & stat.S_ISVTX:
        raise refusal(
            root,
            "root",
            f"{prefix} on its path may be written by others and is not sticky ({describe(status)})",
        )


def open_directory(
    name: str,
    *,
    dir_fd: int,
    display: str | Path,
    what: str,
    create: bool,
    mode: int = READABLE_MODE,
) -> int:
    """A descriptor of directory ``name`` in ``dir_fd`` (made with ``mode`` if ``create``), never
    a link.

    One of ours that others could write is made private (0700) with a warning; anything in it is
    then checked on use. Raises ``UntrustedCacheError`` for a link or another user's directory.
    """
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, mode, dir_fd=dir_fd)
    try:
        fd = os.open(name, _OPEN_DIRECTORY, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            _refuse_planted(name, dir_fd, display, what, exc)
        raise
    try:
        status = os.fstat(fd)
        if status.st_uid not in trusted_uids():
            raise refusal(display, what, f"it belongs to another user ({describe(status)})")
        if status.st_mode & WRITABLE_BY_OTHERS:
            if status.st_uid != os.geteuid():
                raise refusal(display, what, f"others may write it ({describe(status)})")
            os.fchmod(fd, PRIVATE_MODE)
            logger.warning(
                "the op cache's %s %s was writable by others (mode %04o); anyaccel made it "
                "private (0700) and rebuilds whatever in it others could have changed",
                what,
                display,
                stat.S_IMODE(status.st_mode),
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_to_read(name: str, *, dir_fd: int, display: str | Path, what: str) -> int:
    """A descriptor of file ``name`` in ``dir_fd`` to read, never through a link.

    Raises ``UntrustedCacheError`` for a link, a non-regular file or another user's file, and
    ``WritableByOthers`` for one of ours that others may write (the caller rebuilds it).
    """
    try:
        fd = os.open(name, _OPEN_TO_READ, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise refusal(display, what, "it is a symbolic link") from exc
        raise
    try:
        check_file(os.fstat(fd), display=display, what=what)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_file(status: os.stat_result, *, display: str | Path, what: str) -> None:
    """Refuse a file that is not regular or belongs to another user; flag one others may write."""
    if not stat.S_ISREG(status.st_mode):
        raise refusal(display, what, f"it is not a regular file ({describe(status)})")
    if status.st_uid not in trusted_uids():
        raise refusal(display, what, f"it belongs to another user ({describe(status)})")
    if status.st_mode & WRITABLE_BY_OTHERS:
        raise WritableByOthers(f"{display} may have been changed by others ({describe(status)})")


def open_lock(name: str, *, dir_fd: int | None, display: str | Path) -> int:
    """A descriptor of the lock file ``name`` (made 0600), never through a link or a hard link."""
    try:
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | _NO_LINK, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise refusal(display, "lock file", "it is a symbolic link") from exc
        raise
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise refusal(display, "lock file", f"it is not a plain file ({describe(status)})")
        if status.st_nlink != 1:
            raise refusal(display, "lock file", f"it has {status.st_nlink} names (hard links)")
        if status.st_uid not in trusted_uids():
            raise refusal(display, "lock file", f"it belongs to another user ({describe(status)})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_before_build(dir_fd: int, display: str | Path, keep: str) -> None:
    """Before a build writes in directory ``dir_fd``: refuse links, other users' entries and hard
    links (the build's writes would go through them); delete our own files others could have
    changed. ``keep`` (the held lock) is left alone."""
    for name in _entries(dir_fd):
        if name == keep:
            continue
        path = f"{display}/{name}"
        status = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(status.st_mode):
            raise refusal(path, "build file", f"it is a symbolic link ({describe(status)})")
        if status.st_uid not in trusted_uids():
            raise refusal(path, "build file", f"it belongs to another user ({describe(status)})")
        if stat.S_ISDIR(status.st_mode):
            sub = open_directory(name, dir_fd=dir_fd, display=path, what="build directory",
                                 create=False)  # fmt: skip
            try:
                check_before_build(sub, path, keep="")
            finally:
                os.close(sub)
        elif not stat.S_ISREG(status.st_mode):
            raise refusal(path, "build file", f"it is not a plain file ({describe(status)})")
        elif status.st_nlink != 1:
            raise refusal(path, "build file", f"it has {status.st_nlink} names (hard links)")
        elif status.st_mode & WRITABLE_BY_OTHERS:
            os.unlink(name, dir_fd=dir_fd)


def remove_entries(dir_fd: int, keep: str) -> None:
    """Delete everything in directory ``dir_fd`` but ``keep``, never following a link."""
    for name in _entries(dir_fd):
        if name == keep:
            continue
        if stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            sub = os.open(name, _OPEN_DIRECTORY, dir_fd=dir_fd)
            try:
                remove_entries(sub, keep="")
            finally:
                os.close(sub)
            os.rmdir(name, dir_fd=dir_fd)
        else:
            os.unlink(name, dir_fd=dir_fd)


def _entries(dir_fd: int) -> list[str]:
    with os.scandir(dir_fd) as entries:
        return [entry.name for entry in entries]


def make_private_file(fd: int) -> None:
    """Drop group and other write from a file we built (a umask of 002 leaves it group-writable)."""
    mode = stat.S_IMODE(os.fstat(fd).st_mode)
    if mode & WRITABLE_BY_OTHERS:
        os.fchmod(fd, mode & ~WRITABLE_BY_OTHERS)


def descriptor_path(fd: int) -> str | None:
    """A path that names exactly the open file ``fd`` (``/proc/self/fd/N``), or None without /proc.

    Loading or building through it uses the checked file or directory itself, whatever happens
    to the path it was opened by.
    """
    path = f"/proc/self/fd/{fd}"
    return path if os.path.exists(path) else None


@contextlib.contextmanager
def closing(fd: int) -> Iterator[int]:
    """Close ``fd`` when the block ends."""
    try:
        yield fd
    finally:
        os.close(fd)
