"""The cross-process build lock: an exclusive ``flock`` the OS releases if its holder dies."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from anyaccel.ops.jit.trust import open_lock

#: The lock file inside each build directory.
LOCK_FILE = "anyaccel.lock"


@contextlib.contextmanager
def exclusive_file_lock(
    path: str | Path, *, dir_fd: int | None = None, display: str | Path | None = None
) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (relative to ``dir_fd`` if given); the OS
    releases it if the process dies. The file is never opened through a link (see ``trust``)."""
    fd = open_lock(str(path), dir_fd=dir_fd, display=display or path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
