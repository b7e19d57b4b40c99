"""The on-disk build cache: load a finished build, or build it once under a file lock.

A finished build is a directory under the cache's home (``trust.build_home``) holding the
library and a stamp written last; a cached load imports the library directly (no compiler
probe, no subprocess). Every directory and file is opened by descriptor and checked by the
trust rule in ``trust`` before it is built in or loaded; the library loaded is the one checked.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from anyaccel.guard import patience
from anyaccel.ops.errors import BuildToolMissingError, ExtensionsDirError, OpError, OpLoadError
from anyaccel.ops.jit.announce import announce, logger
from anyaccel.ops.jit.compiler import compile_extension, workspace
from anyaccel.ops.jit.elf import library_problem
from anyaccel.ops.jit.lock import LOCK_FILE, exclusive_file_lock
from anyaccel.ops.jit.plan import (
    EXTENSIONS_DIR_ENV,
    STAMP_FILE,
    STAMP_MAX_BYTES,
    BuildPlan,
    extensions_root,
)
from anyaccel.ops.jit.toolchain import toolchain_problem
from anyaccel.ops.jit.trust import (
    WritableByOthers,
    check_before_build,
    closing,
    descriptor_path,
    make_private_file,
    open_directory,
    open_home,
    open_to_read,
    remove_entries,
)


class _LibraryDoesNotLoad(OpError):
    """The loader refused a cached library; carries its message (never leaves this module)."""

    def __init__(self, loader_message: str) -> None:
        super().__init__(loader_message)
        self.loader_message = loader_message


class _NotCached(OpError):
    """No finished build of the plan on disk (never leaves this module).

    ``found`` says what was there instead when that is worth telling the user (a build
    directory this user cannot read, a build of other sources), else ``None``.
    """

    def __init__(self, reason: str, found: str | None = None) -> None:
        super().__init__(reason)
        self.found = found


def load_or_build(plan: BuildPlan) -> ModuleType:
    """Import a finished build from disk, building it first (under a file lock) if needed.

    Loading needs only to read: a read-only cache (a container image's, a shared software
    tree) that holds a good build loads it, whoever built it there, as long as the trust rule
    holds. A cached library that does not load (truncated by a full disk, a killed copy) or
    that others could have changed is rebuilt once, with a warning. When it cannot be rebuilt
    (no compiler, a read-only cache) the error names what was found, why it cannot be rebuilt
    and what to do. Raises ``UntrustedCacheError`` where the cache could hold another user's
    code (see ``anyaccel.ops.jit.trust``).
    """
    found: str | None = None  # what the cache held instead of a loadable build, if anything
    try:
        return import_cached(plan)
    except _NotCached as missing:
        found = missing.found
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
                f"({failed.loader_message}), and it cannot be rebuilt here: {problem}. Install "
                f"the build tools, or copy a good build of this op into {plan.build_directory} "
                f"(build it where the tools are with `anyaccel ops --build {plan.builder}`)",
                library_path=plan.library_path,
                loader_message=failed.loader_message,
            ) from failed
        found = f"a build at {plan.library_path} that does not load ({failed.loader_message})"
    problem = toolchain_problem(plan.with_cuda)
    if problem is not None:
        cached = f"; the cache holds {found}" if found else ""
        raise BuildToolMissingError(
            f"cannot build op {plan.op_name!r}: {problem}{cached}. Nothing usable is cached in "
            f"{plan.build_directory}: install the build tools, or pre-build the op where they are "
            f"(`anyaccel ops --build {plan.builder}`) into the same {EXTENSIONS_DIR_ENV}"
        )
    lock = _inside(plan, LOCK_FILE)
    with (
        patience(),  # waiting for a build, or building, is no hang of guarded code
        usable_build_directory(plan, found) as build_fd,
        exclusive_file_lock(LOCK_FILE, dir_fd=build_fd, display=lock),
    ):
        reason = build_reason(plan)
        try:  # another process may have finished (or repaired) it while we waited
            return import_extension(plan, build_fd)
        except _NotCached:
            pass
        except _LibraryDoesNotLoad as failed:
            reason = f"the cached library does not load ({failed.loader_message})"
            remove_entries(build_fd, keep=LOCK_FILE)
        check_before_build(build_fd, plan.build_directory, keep=LOCK_FILE)
        shared = f", library {plan.library}" if plan.library != plan.op_name else ""
        announce(
            f"building op {plan.op_name!r} ({plan.builder}{shared}): {reason}; this takes "
            f"a while once, then it is cached in {plan.build_directory}"
        )
        started = time.perf_counter()
        module = compile_extension(plan, workspace(build_fd, plan.build_directory))
        elapsed = time.perf_counter() - started
        write_stamp(plan, build_fd, elapsed)
    announce(f"built op {plan.op_name!r} in {elapsed:.1f} s")
    return module


def _inside(plan: BuildPlan, name: str) -> str:
    return os.path.join(plan.build_directory, name)


def import_cached(plan: BuildPlan) -> ModuleType:
    """Import ``plan``'s finished build without creating anything; ``_NotCached`` if none."""
    try:
        home = open_home(extensions_root(), create=False)
    except OSError as exc:
        raise _NotCached(str(exc)) from exc
    with closing(home):
        try:
            build_fd = open_directory(
                plan.extension_name,
                dir_fd=home,
                display=plan.build_directory,
                what="build directory",
                create=False,
            )
        except FileNotFoundError as exc:
            raise _NotCached(str(exc)) from exc
        except OSError as exc:  # there, but not for this user (another user's 0700 build)
            found = (
                f"a build directory {plan.build_directory} this user cannot open "
                f"({exc.strerror or exc}; a cache made by another user must let others read it)"
            )
            raise _NotCached(str(exc), found) from exc
        with closing(build_fd):
            return import_extension(plan, build_fd)


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


@contextlib.contextmanager
def usable_build_directory(plan: BuildPlan, found: str | None = None) -> Iterator[int]:
    """A descriptor of ``plan``'s build directory, created and checked (``trust``) and proven
    writable; else ``ExtensionsDirError`` (``UntrustedCacheError`` where it is not trusted),
    naming ``found`` (what the cache held instead of a loadable build) or the build looked for.

    Writability is tested by writing a file, not with ``os.access``, which says yes to root
    even on a read-only mount or in ``/proc``.
    """
    root = extensions_root()
    build_fd = -1
    try:
        with closing(open_home(root, create=True)) as home:
            build_fd = open_directory(
                plan.extension_name,
                dir_fd=home,
                display=plan.build_directory,
                what="build directory",
                create=True,
            )
        probe = f".write-test-{os.getpid()}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        os.close(os.open(probe, flags, 0o600, dir_fd=build_fd))
        os.unlink(probe, dir_fd=build_fd)
    except OSError as exc:
        if build_fd >= 0:
            os.close(build_fd)
        where = (
            f"{EXTENSIONS_DIR_ENV}={os.environ[EXTENSIONS_DIR_ENV]}"
            if os.environ.get(EXTENSIONS_DIR_ENV)
            else f"the default cache {root}"
        )
        cached = (
            f"it holds {found}"
            if found
            else f"it holds no build of this op for this torch, compiler and flags (looked for "
            f"{plan.extension_name}: pre-build it with `anyaccel ops --build {plan.builder}` "
            f"where it runs)"
        )
        raise ExtensionsDirError(
            f"cannot build op {plan.op_name!r}: {where} is not a writable directory "
            f"({_why_unusable(Path(plan.build_directory), exc)}), and {cached}. Point "
            f"{EXTENSIONS_DIR_ENV} at a writable directory, e.g. "
            f"`export {EXTENSIONS_DIR_ENV}=$HOME/.cache/torch_extensions`",
            path=str(root),
        ) from exc
    with closing(build_fd):
        yield build_fd


def _why_unusable(path: Path, exc: OSError) -> str:
    """The first component of ``path`` that exists but is not a directory, else the OS reason."""
    for candidate in [*reversed(path.parents), path]:
        if candidate.exists() and not candidate.is_dir():
            return f"{candidate} is a file, not a directory"
    return f"{exc.strerror or exc} at {exc.filename or path}"


def write_stamp(plan: BuildPlan, build_fd: int, seconds: float) -> None:
    """Record a finished build atomically, so readers never see a half-written one.

    The library is first made writable by its owner only (a umask of 002 leaves it
    group-writable, and a cached load refuses that).
    """
    library_fd = os.open(
        f"{plan.extension_name}.so", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=build_fd
    )
    with closing(library_fd):
        make_private_file(library_fd)
        size = os.fstat(library_fd).st_size
    record: dict[str, object] = {
        "key": plan.key,
        "extension": plan.extension_name,
        "build_seconds": round(seconds, 2),
        "library_bytes": size,
        "cflags": " ".join(plan.cflags),
    }
    partial = f"{STAMP_FILE}.tmp{os.getpid()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with contextlib.suppress(FileNotFoundError):
        os.unlink(partial, dir_fd=build_fd)  # left by a killed process that had our pid
    with os.fdopen(os.open(partial, flags, 0o644, dir_fd=build_fd), "w", encoding="utf-8") as out:
        out.write(json.dumps(record, indent=1))
    os.replace(partial, STAMP_FILE, src_dir_fd=build_fd, dst_dir_fd=build_fd)


def read_stamp(plan: BuildPlan, build_fd: int) -> dict[str, object]:
    """The stamp of ``plan``'s finished build in ``build_fd``; ``_NotCached`` if there is none."""
    try:
        stamp_fd = open_to_read(
            STAMP_FILE, dir_fd=build_fd, display=_inside(plan, STAMP_FILE), what="build record"
        )
    except FileNotFoundError as exc:
        library = f"{plan.extension_name}.so"
        unfinished = (
            f"an unfinished build at {plan.build_directory} (a library but no {STAMP_FILE}: "
            f"a build was interrupted)"
            if os.path.lexists(os.path.join(plan.build_directory, library))
            else None
        )
        raise _NotCached("no stamp", unfinished) from exc
    try:
        with os.fdopen(stamp_fd, "rb") as handle:
            recorded = json.loads(handle.read(STAMP_MAX_BYTES))
    except (OSError, ValueError) as exc:
        corrupt = f"a corrupt build record {_inside(plan, STAMP_FILE)} ({exc})"
        raise _NotCached(f"unreadable stamp: {exc}", corrupt) from exc
    if not isinstance(recorded, dict) or recorded.get("key") != plan.key:
        raise _NotCached("the stamp is another build's")
    return recorded


def import_extension(plan: BuildPlan, build_fd: int) -> ModuleType:
    """Import the finished build in ``build_fd`` (the fast, subprocess-free path).

    The library is opened without following a link, checked (``trust``, then its size and ELF
    headers) and loaded through that same descriptor. Raises ``_NotCached`` when there is no
    finished build, ``_LibraryDoesNotLoad`` with the reason when it is unusable or others could
    have changed it, and ``UntrustedCacheError`` when it is not ours.
    """
    import torch  # noqa: F401  # the library links against libtorch, which must be loaded first

    try:
        recorded = read_stamp(plan, build_fd)
        library_fd = open_to_read(
            f"{plan.extension_name}.so",
            dir_fd=build_fd,
            display=plan.library_path,
            what="library",
        )
    except FileNotFoundError as exc:
        raise _NotCached("no library") from exc
    except WritableByOthers as exc:
        raise _LibraryDoesNotLoad(f"not loaded, since others could have changed it: {exc}") from exc
    try:
        with os.fdopen(os.dup(library_fd), "rb") as library:
            problem = library_problem(library, recorded.get("library_bytes"))
        if problem is not None:
            raise _LibraryDoesNotLoad(problem)
        path = descriptor_path(library_fd) or plan.library_path
        loader = importlib.machinery.ExtensionFileLoader(plan.extension_name, path)
        spec = importlib.util.spec_from_file_location(plan.extension_name, path, loader=loader)
        if spec is None:
            raise _LibraryDoesNotLoad(f"no importable library at {plan.library_path}")
        try:
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
        except (ImportError, OSError) as exc:
            raise _LibraryDoesNotLoad(str(exc)) from exc
    except BaseException:
        os.close(library_fd)
        raise
    _loaded_through.append(library_fd)
    module.__file__ = plan.library_path
    return module


#: The descriptors cached libraries were loaded through, open for the life of the process:
#: dlopen knows a loaded library by the path it was given (``/proc/self/fd/N``), and a closed
#: descriptor's number is handed out again, so the next library loaded through the same number
#: would be answered with the first (its ``PyInit_`` missing, and rebuilt on every run).
_loaded_through: list[int] = []
