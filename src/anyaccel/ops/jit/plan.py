"""``BuildPlan``: everything one build would do, and where its result is cached on disk."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

#: Where compiled ops are cached (shared with torch's own JIT extensions).
EXTENSIONS_DIR_ENV = "TORCH_EXTENSIONS_DIR"
#: The record of a finished build, written last (atomically) into its build directory.
STAMP_FILE = "anyaccel-build.json"
#: A stamp is a few hundred bytes; more is not one of ours.
STAMP_MAX_BYTES = 1 << 16
#: The full compiler output of a failed build.
LOG_FILE = "build.log"


def extensions_root() -> Path:
    """The cache root: ``$TORCH_EXTENSIONS_DIR``, else ``$XDG_CACHE_HOME/torch_extensions``.

    Builds go in it directly only when no one else may write it (``trust.build_home``).
    """
    configured = os.environ.get(EXTENSIONS_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(cache_home).expanduser() / "torch_extensions"


@dataclass(frozen=True)
class BuildPlan:
    """Everything one build would do, computed without compiling: the dry-run view of a build."""

    op_name: str
    builder: str
    library: str
    extension_name: str
    build_directory: str
    sources: tuple[str, ...]
    depends: tuple[str, ...]
    include_paths: tuple[str, ...]
    cflags: tuple[str, ...]
    cuda_cflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    with_cuda: bool
    key: str

    @property
    def library_path(self) -> str:
        """The shared library this build produces."""
        return os.path.join(self.build_directory, f"{self.extension_name}.so")

    @property
    def log_path(self) -> str:
        """Where the full compiler output of a failed build is written."""
        return os.path.join(self.build_directory, LOG_FILE)

    def describe(self) -> str:
        """A human-readable account of the build: names, paths and every flag."""
        rows = [
            ("op", f"{self.op_name} ({self.builder})"),
            ("library", self.library),
            ("extension", self.extension_name),
            ("build directory", self.build_directory),
            ("sources", " ".join(self.sources)),
            ("include paths", " ".join(self.include_paths) or "-"),
            ("cflags", " ".join(self.cflags)),
            ("cuda cflags", " ".join(self.cuda_cflags) or "-"),
            ("ldflags", " ".join(self.ldflags) or "-"),
            ("cached", "yes" if is_built(self) else "no"),
        ]
        return "\n".join(f"{label:>15}: {value}" for label, value in rows)


def is_built(plan: BuildPlan) -> bool:
    """Whether ``plan`` has a finished build on disk (its stamp matches and its library exists).

    A quick look for reports, never through a link; ``OpBuilder.load`` decides by the cache's
    trust rule (``anyaccel.ops.jit.trust``) whether a build may be loaded.
    """
    stamp = Path(plan.build_directory) / STAMP_FILE
    try:
        fd = os.open(stamp, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            recorded = json.loads(handle.read(STAMP_MAX_BYTES))
    except (OSError, ValueError):
        return False
    return bool(
        isinstance(recorded, dict)
        and recorded.get("key") == plan.key
        and os.path.exists(plan.library_path)
    )
