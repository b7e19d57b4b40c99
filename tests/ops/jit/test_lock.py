"""The cross-process build lock: one holder at a time, released when its holder dies."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from anyaccel.ops.jit.lock import exclusive_file_lock

#: Tries the lock without waiting; prints "free" or "held".
TRY_LOCK = textwrap.dedent(
    """
    import fcntl, sys
    with open(sys.argv[1], "a+") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("held")
        else:
            print("free")
    """
)


def _probe(path: Path) -> str:
    """What another process sees when it tries the lock at ``path``."""
    result = subprocess.run(
        [sys.executable, "-c", TRY_LOCK, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_another_process_waits_while_the_lock_is_held(tmp_path: Path) -> None:
    path = tmp_path / "anyaccel.lock"
    with exclusive_file_lock(path):
        assert _probe(path) == "held"
    assert _probe(path) == "free"


def test_a_killed_holder_releases_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "anyaccel.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from anyaccel.ops.jit.lock import exclusive_file_lock\n"
            "from pathlib import Path\n"
            "with exclusive_file_lock(Path(sys.argv[1])):\n"
            "    print('locked', flush=True)\n"
            "    time.sleep(120)\n",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src")},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        assert _probe(path) == "held"
    finally:
        holder.kill()
        holder.wait(timeout=60)
    assert _probe(path) == "free"
