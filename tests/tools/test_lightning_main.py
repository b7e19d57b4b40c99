"""tools/lightning_main.sh up to the build: what it takes as a Lightning source, what it refuses.

The full run (building Lightning's main and running the Lightning tests on it) takes minutes;
docs/lightning.md ("Tested versions") records it. These runs stop at the first check that
fails, or at a build of a stand-in ``setup.py`` that exits at once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "lightning_main.sh"
STAND_IN = 'raise SystemExit("a stand-in for setup.py: no build")\n'

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or shutil.which("bash") is None, reason="needs git and bash"
)


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The script as a user runs it, with a bounded time."""
    return subprocess.run(
        ["bash", str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PIP_NO_INDEX": "1"},
    )


def git(where: Path, *args: str) -> str:
    """Run git in ``where`` as a fixed author; its output."""
    identity = ["-c", "user.name=test", "-c", "user.email=test@example.com"]
    done = subprocess.run(
        ["git", *identity, "-C", str(where), *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def lightning_tree(root: Path) -> Path:
    """The layout the script looks for (``setup.py``, ``src/lightning``), with a stand-in setup."""
    (root / "src" / "lightning").mkdir(parents=True)
    (root / "src" / "lightning" / "__init__.py").write_text("")
    (root / "setup.py").write_text(STAND_IN)
    return root


def test_without_arguments_it_prints_its_usage() -> None:
    result = run()
    assert result.returncode == 2
    assert "Usage: tools/lightning_main.sh SOURCE [REV]" in result.stderr


def test_a_missing_source_is_named(tmp_path: Path) -> None:
    result = run(tmp_path / "nowhere")
    assert result.returncode == 2
    assert f"SOURCE={tmp_path / 'nowhere'} is no directory" in result.stderr


def test_a_directory_without_lightnings_layout_is_refused(tmp_path: Path) -> None:
    result = run(tmp_path)
    assert result.returncode == 2
    assert "is no Lightning source: it lacks setup.py or src/lightning" in result.stderr


def test_a_rev_of_a_plain_source_tree_is_refused(tmp_path: Path) -> None:
    result = run(lightning_tree(tmp_path), "main")
    assert result.returncode == 2
    assert "REV=main given, but" in result.stderr and "no git repository" in result.stderr


def test_a_repository_is_built_at_the_rev_and_its_commit_printed(tmp_path: Path) -> None:
    repo = lightning_tree(tmp_path / "lightning")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "a stand-in")
    commit = git(repo, "rev-parse", "HEAD")
    date = git(repo, "log", "-1", "--format=%cI")
    git(repo, "rm", "-q", "setup.py")
    git(repo, "commit", "-q", "-m", "no setup.py")
    bare = tmp_path / "mirror.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    for source in (repo, bare):
        result = run(source, commit)
        assert f"== Lightning commit {commit} of {date}" in result.stdout
        assert "== building PACKAGE_NAME=lightning" in result.stdout  # setup.py of `commit`
        assert result.returncode != 0 and "a stand-in for setup.py" in result.stderr
        at_head = run(source)  # HEAD has no setup.py
        assert at_head.returncode == 2 and "at HEAD" not in at_head.stderr
        assert "is no Lightning source" in at_head.stderr


def test_a_source_tree_inside_another_repository_is_built_as_it_is(tmp_path: Path) -> None:
    # the enclosing repository's HEAD is not what is built
    git(tmp_path, "init", "-q")
    tree = lightning_tree(tmp_path / "checkout")
    result = run(tree)
    assert f"== Lightning source tree {tree.resolve()}" in result.stdout
    assert "== Lightning commit" not in result.stdout
    assert result.returncode != 0 and "a stand-in for setup.py" in result.stderr
