"""The on-disk build cache: load a finished build, or build it once under a file lock.

A finished build is a directory under ``extensions_root()`` holding the library and a stamp
written last; a cached load imports the library directly (no compiler probe, no subprocess).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from types import ModuleType

from anyaccel.ops.errors import BuildToolMissingError, ExtensionsDirError, OpError, OpLoadError
from anyaccel.ops.jit.announce import announce, logger
from anyaccel.ops.jit.compiler import compile_extension
from anyaccel.ops.jit.elf import library_problem
from anyaccel.ops.jit.lock import LOCK_FILE, exclusive_file_lock
from anyaccel.ops.jit.plan import (
    EXTENSIONS_DIR_ENV,
    STAMP_FILE,
    BuildPlan,
    extensions_root,
    is_built,
)
from anyaccel.ops.jit.toolchain import toolchain_problem


class _LibraryDoesNotLoad(OpError):
    """The loader refused a cached library; carries its message (never leaves this module)."""

    def __init__(self, loader_message: str) -> None:
        super().__init__(loader_message)
        self.loader_message = loader_message


def load_or_build(plan: BuildPlan) -> ModuleType:
    """Import a finished build from disk, building it first (under a file lock) if needed.

    A cached library that does not load (truncated by a full disk, a killed copy) is
    rebuilt once, with a warning; a read-only cache that holds a good build still loads.
    """
    if is_built(plan):
        try:
            return import_extension(plan)
        except _LibraryDoesNotLoad as failed:
            logger.warning(
                "cached op %r at %s does not load (%s); rebuilding it once",
                plan.op_name,
                plan.library_path,
                failed.loader_message,
            )
            problem = toolchain_problem(plan.with_cuda)
            if problem is not None:
                raise OpLoadError(
                    f"cached op {plan.op_name!r} at {plan.library_path} does not load "
                    f"({failed.loader_message}) and cannot be rebuilt here: {problem}; "
                    f"or copy a good build into {plan.build_directory}",
                    library_path=plan.library_path,
                    loader_message=failed.loader_message,
                ) from failed
    problem = toolchain_problem(plan.with_cuda)
    if problem is not None:
        raise BuildToolMissingError(f"cannot build op {plan.op_name!r}: {problem}")
    build_directory = usable_build_directory(plan)
    with exclusive_file_lock(build_directory / LOCK_FILE):
        reason = build_reason(plan)
        if is_built(plan):  # another process finished (or repaired) it while we waited
            try:
                return import_extension(plan)
            except _LibraryDoesNotLoad as failed:
                reason = f"the cached library does not load ({failed.loader_message})"
                discard_build(build_directory)
        shared = f", library {plan.library}" if plan.library != plan.op_name else ""
        announce(
            f"building op {plan.op_name!r} ({plan.builder}{shared}): {reason}; this takes a "
            f"while once, then it is cached in {plan.build_directory}"
        )
        started = time.perf_counter()
        module = compile_extension(plan)
        elapsed = time.perf_counter() - started
        write_stamp(plan, elapsed)
    announce(f"built op {plan.op_name!r} in {elapsed:.1f} s")
    return module


def build_reason(plan: BuildPlan) -> str:
    """Why ``plan`` must be built: first use, or a cached build of the op no longer matches."""
    build_directory = Path(plan.build_directory)
    try:
        older = sorted(
            path.name
            for path in build_directory.parent.glob(f"anyaccel_{plan.library}_*")
            if path.name != plan.extension_name and (path / STAMP_FILE).exists()
        )
    except OSError:
        older = []
    if older:
        return (
            f"the cached build ({', '.join(older[:2])}) no longer matches its sources, flags, "
            "torch or compiler"
        )
    if (build_directory / STAMP_FILE).exists():
        return "the cached build no longer matches its sources, flags, torch or compiler"
    return "first use (nothing cached yet)"


def usable_build_directory(plan: BuildPlan) -> Path:
    """Create ``plan``'s build directory and prove it writable; else ``ExtensionsDirError``.

    Writability is tested by writing a file, not with ``os.access``, which says yes to root
    even on a read-only mount or in ``/proc``.
    """
    build_directory = Path(plan.build_directory)
    try:
        build_directory.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".write-test-", dir=build_directory)
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        root = extensions_root()
        where = (
            f"{EXTENSIONS_DIR_ENV}={os.environ[EXTENSIONS_DIR_ENV]}"
            if os.environ.get(EXTENSIONS_DIR_ENV)
            else f"the default cache {root}"
        )
        raise ExtensionsDirError(
            f"cannot build op {plan.op_name!r}: {where} is not a writable directory "
            f"({_why_unusable(build_directory, exc)}); point {EXTENSIONS_DIR_ENV} at a "
            f"writable directory, e.g. `export {EXTENSIONS_DIR_ENV}=$HOME/.cache/torch_extensions`",
            path=str(root),
        ) from exc
    return build_directory


def _why_unusable(path: Path, exc: OSError) -> str:
    """The first component of ``path`` that exists but is not a directory, else the OS reason."""
    for candidate in [*reversed(path.parents), path]:
        if candidate.exists() and not candidate.is_dir():
            return f"{candidate} is a file, not a directory"
    return f"{exc.strerror or exc} at {exc.filename or path}"


def discard_build(build_directory: Path) -> None:
    """Delete a build that does not load (all but the lock we hold), so it builds from scratch."""
    for entry in build_directory.iterdir():
        if entry.name == LOCK_FILE:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def write_stamp(plan: BuildPlan, seconds: float) -> None:
    """Record a finished build atomically, so readers never see a half-written one."""
    stamp = Path(plan.build_directory) / STAMP_FILE
    partial = stamp.with_suffix(f".tmp{os.getpid()}")
    record: dict[str, object] = {
        "key": plan.key,
        "extension": plan.extension_name,
        "build_seconds": round(seconds, 2),
        "library_bytes": os.path.getsize(plan.library_path),
    }
    record["cflags"] = " ".join(plan.cflags)
    partial.write_text(json.dumps(record, indent=1), encoding="utf-8")
    os.replace(partial, stamp)


def import_extension(plan: BuildPlan) -> ModuleType:
    """Import a finished build's shared library directly (the fast, subprocess-free path).

    Raises ``_LibraryDoesNotLoad`` with the loader's message when the library is unusable.
    """
    import torch  # noqa: F401  # the library links against libtorch, which must be loaded first

    problem = library_problem(plan)
    if problem is not None:
        raise _LibraryDoesNotLoad(problem)
    spec = importlib.util.spec_from_file_location(plan.extension_name, plan.library_path)
    if spec is None or spec.loader is None:
        raise _LibraryDoesNotLoad(f"no importable library at {plan.library_path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except (ImportError, OSError) as exc:
        raise _LibraryDoesNotLoad(str(exc)) from exc
    return module
