"""The cross-process build lock: an exclusive ``flock`` the OS releases if its holder dies."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

#: The lock file inside each build directory.
LOCK_FILE = "anyaccel.lock"


@contextlib.contextmanager
def exclusive_file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path``; the OS releases it if the process dies."""
    with open(path, "a+", encoding="utf-8") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
