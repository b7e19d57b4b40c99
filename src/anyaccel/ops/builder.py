"""The ``OpBuilder`` base: a native op's sources and flags, JIT-compiled with torch and ninja.

A build is identified by a hash of everything that affects its output (source contents, flags,
torch and Python versions, the compiler named by ``CXX``), so the compiled artefact under
``TORCH_EXTENSIONS_DIR`` is reused across processes and a cached load imports it directly:
no compiler probe, no subprocess.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import io
import json
import logging
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import ClassVar

from anyaccel.forksafe import ForkSafeLock
from anyaccel.ops.errors import (
    BuildToolMissingError,
    ExtensionsDirError,
    OpBuildError,
    OpLoadError,
    OpNotAvailableError,
)

#: Where compiled ops are cached (shared with torch's own JIT extensions).
EXTENSIONS_DIR_ENV = "TORCH_EXTENSIONS_DIR"
#: Bump when the layout of a build directory changes, to invalidate older caches.
_LAYOUT_VERSION = "1"
_STAMP_FILE = "anyaccel-build.json"
_LOG_FILE = "build.log"
_LOCK_FILE = "anyaccel.lock"

_loaded: dict[str, ModuleType] = {}
_load_lock = ForkSafeLock(reentrant=True)  # a fork mid-load must not leave it held

#: Builds are announced here (INFO) and cache repairs warned about (WARNING).
logger = logging.getLogger("anyaccel.ops")


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time (as logging's handler of last resort)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


_default_handler = _StderrHandler()
_default_handler.setFormatter(logging.Formatter("[anyaccel] %(message)s"))


def _logging_unconfigured() -> bool:
    """Whether neither the application nor the user has configured logging for anyaccel."""
    root = logging.getLogger()
    chain = (logging.getLogger("anyaccel"), logger)
    return (
        not root.handlers
        and root.level <= logging.WARNING
        and logging.root.manager.disable < logging.INFO
        and all(node.level == logging.NOTSET and not node.handlers for node in chain)
    )


def announce(message: str) -> None:
    """Log ``message`` at INFO on ``anyaccel.ops``, shown on stderr while logging is unconfigured.

    Builds take seconds to minutes, so users see them by default; once logging is configured
    the usual rules apply (``logging.getLogger("anyaccel").setLevel(logging.WARNING)`` silences).
    """
    if _logging_unconfigured():
        _default_handler.handle(
            logger.makeRecord(logger.name, logging.INFO, __file__, 0, message, (), None)
        )
    else:
        logger.info(message)


@dataclass(frozen=True)
class Compatibility:
    """Whether an op can be built here, and if not, why (with the remedy)."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


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
        return os.path.join(self.build_directory, _LOG_FILE)

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


def extensions_root() -> Path:
    """The cache root: ``$TORCH_EXTENSIONS_DIR``, else ``$XDG_CACHE_HOME/torch_extensions``."""
    configured = os.environ.get(EXTENSIONS_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(cache_home).expanduser() / "torch_extensions"


def find_ninja() -> str | None:
    """The ``ninja`` executable on PATH, or ``None`` (a PATH lookup, no subprocess)."""
    return shutil.which("ninja")


def cxx_compiler() -> str:
    """The C++ compiler torch's JIT will invoke: ``$CXX``, else ``c++``."""
    return os.environ.get("CXX", "c++")


def toolchain_problem(with_cuda: bool = False) -> str | None:
    """Why the build tools are unusable (with the remedy), or ``None`` when they are present."""
    if find_ninja() is None:
        return "ninja is not on PATH; install it with `pip install ninja`"
    compiler = cxx_compiler()
    if shutil.which(compiler) is None:
        return (
            f"C++ compiler {compiler!r} not found; install g++ (e.g. `apt-get install g++`) "
            "or point CXX at a compiler"
        )
    if with_cuda:
        cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
        nvcc = os.path.join(cuda_home, "bin", "nvcc")
        if not os.path.exists(nvcc) and shutil.which("nvcc") is None:
            return (
                f"nvcc not found (looked in {nvcc} and PATH); install the CUDA toolkit "
                "matching torch.version.cuda and set CUDA_HOME"
            )
    return None


def first_error_lines(output: str, limit: int = 8) -> list[str]:
    """The compiler's first error and the lines after it (or the output's tail if none match)."""
    lines = [line for line in output.splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if re.search(r"\b(fatal )?error\b", line, re.IGNORECASE) and not line.startswith(
            ("Error building extension", "FAILED:", "ninja: build stopped")
        ):
            return lines[index : index + limit]
    return lines[-limit:]


def is_built(plan: BuildPlan) -> bool:
    """Whether ``plan`` has a finished build on disk (its stamp matches and its library exists)."""
    stamp = Path(plan.build_directory) / _STAMP_FILE
    try:
        recorded = json.loads(stamp.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(recorded.get("key") == plan.key and os.path.exists(plan.library_path))


class OpBuilder:
    """A native op: its sources, include paths and flags; builds and loads it just in time.

    Subclasses set ``NAME`` and override ``sources()`` and the flag hooks; DeepSpeed-style
    callers use ``is_compatible()`` and ``load()``.
    """

    #: The op's name, e.g. ``"cpu_adam"``; empty on abstract bases (which are never discovered).
    NAME: ClassVar[str] = ""
    #: The compiled library's name, when several ops are one build (same sources and flags, so
    #: they compile once and load as one module); empty means the op's own ``NAME``.
    LIBRARY: ClassVar[str] = ""

    def __init__(self) -> None:
        if not self.NAME:
            raise TypeError(f"{type(self).__name__} is abstract: it sets no NAME")
        self.name = self.NAME

    # --- what to build (override) ---------------------------------------------------------
    def sources(self) -> list[str]:
        """Absolute paths of the source files."""
        raise NotImplementedError(f"{type(self).__name__} must list its sources")

    def depends(self) -> list[str]:
        """Headers the sources include; their contents are part of the build hash."""
        return []

    def include_paths(self) -> list[str]:
        """Extra include directories."""
        return []

    def cxx_args(self) -> list[str]:
        """Flags for the C++ compiler (no ``-std``: torch adds the standard its headers need)."""
        return ["-O3"]

    def nvcc_args(self) -> list[str]:
        """Flags for nvcc (CUDA builders only)."""
        return []

    def extra_ldflags(self) -> list[str]:
        """Flags for the linker."""
        return []

    def with_cuda(self) -> bool:
        """Whether the build compiles CUDA sources with nvcc."""
        return False

    def platform_compatibility(self) -> Compatibility:
        """Whether this host/torch can run the op at all, build tools aside (override)."""
        return Compatibility(True)

    # --- queries ---------------------------------------------------------------------------
    def absolute_name(self) -> str:
        """The op's dotted name, as DeepSpeed builders report it."""
        return f"anyaccel.ops.{self.NAME}_op"

    def compatibility(self) -> Compatibility:
        """Whether the op can be built here, with the reason when not (cheap: no subprocess)."""
        platform_ok = self.platform_compatibility()
        if not platform_ok:
            return platform_ok
        problem = toolchain_problem(self.with_cuda())
        return Compatibility(problem is None, problem or "")

    def is_compatible(self, verbose: bool = False) -> bool:
        """DeepSpeed's spelling of ``compatibility()``; prints the reason when ``verbose``."""
        result = self.compatibility()
        if verbose and not result:
            print(f"[anyaccel] op {self.NAME!r} cannot be built: {result.reason}", file=sys.stderr)
        return result.ok

    def plan(self) -> BuildPlan:
        """The build this builder would run, with its hash-derived name: a dry run, no compiler."""
        sources = tuple(os.path.abspath(path) for path in self.sources())
        depends = tuple(os.path.abspath(path) for path in self.depends())
        include_paths = tuple(self.include_paths())
        cflags = tuple(self.cxx_args())
        cuda_cflags = tuple(self.nvcc_args()) if self.with_cuda() else ()
        ldflags = tuple(self.extra_ldflags())
        library = self.LIBRARY or self.NAME
        key = self._build_key(
            library, sources + depends, include_paths, cflags, cuda_cflags, ldflags
        )
        extension_name = f"anyaccel_{library}_{key[:12]}"
        return BuildPlan(
            op_name=self.NAME,
            builder=type(self).__name__,
            library=library,
            extension_name=extension_name,
            build_directory=str(extensions_root() / extension_name),
            sources=sources,
            depends=depends,
            include_paths=include_paths,
            cflags=cflags,
            cuda_cflags=cuda_cflags,
            ldflags=ldflags,
            with_cuda=self.with_cuda(),
            key=key,
        )

    def _build_key(
        self, library: str, files: tuple[str, ...], *flag_groups: tuple[str, ...]
    ) -> str:
        """A hash of every input that changes the compiled artefact."""
        import torch

        digest = hashlib.sha256()
        context = [
            _LAYOUT_VERSION,
            library,
            torch.__version__,
            sys.implementation.cache_tag,
            platform.machine(),
            cxx_compiler(),
            str(self.with_cuda()),
        ]
        digest.update(json.dumps([context, [list(group) for group in flag_groups]]).encode())
        for path in files:
            try:
                digest.update(Path(path).read_bytes())
            except OSError as exc:
                raise OpBuildError(
                    f"op {self.NAME!r}: cannot read source {path}: {exc.strerror}; "
                    "reinstall anyaccel or fix the builder's sources()"
                ) from exc
        return digest.hexdigest()

    # --- building and loading --------------------------------------------------------------
    def load(self, verbose: bool = False) -> ModuleType:
        """The compiled module: from this process's cache, the on-disk cache, or a fresh build.

        Raises ``OpNotAvailableError`` when the op cannot run here (wrong backend, a forced SIMD
        level this CPU lacks), ``BuildToolMissingError`` when a build is needed and a tool is
        missing, ``ExtensionsDirError`` when the cache directory is unusable, ``OpBuildError``
        when compiling fails and ``OpLoadError`` when a library does not load even after one
        rebuild; all are ``OpError``s. A build is announced on the ``anyaccel.ops`` logger.
        """
        verdict = self.platform_compatibility()
        if not verdict:
            raise OpNotAvailableError(f"op {self.NAME!r} cannot run here: {verdict.reason}")
        plan = self.plan()
        with _load_lock:
            module = _loaded.get(plan.key)
            if module is None:
                try:
                    module = self._load_uncached(plan)
                except (OSError, ImportError) as exc:  # last resort: never a raw loader error
                    raise OpLoadError(
                        f"loading op {self.NAME!r} failed: {type(exc).__name__}: {exc}; "
                        f"cache: {plan.build_directory}",
                        library_path=plan.library_path,
                        loader_message=str(exc),
                    ) from exc
                _loaded[plan.key] = module
        return module

    def jit_load(self, verbose: bool = False) -> ModuleType:
        """DeepSpeed's name for ``load()``."""
        return self.load(verbose)

    def builder(self) -> object:
        """A setuptools extension with the same sources and flags, for ahead-of-time builds."""
        from torch.utils import cpp_extension

        plan = self.plan()
        extension_type = (
            cpp_extension.CUDAExtension if plan.with_cuda else cpp_extension.CppExtension
        )
        compile_args: dict[str, list[str]] = {"cxx": list(plan.cflags)}
        if plan.with_cuda:
            compile_args["nvcc"] = list(plan.cuda_cflags)
        return extension_type(  # type: ignore[no-untyped-call]
            name=self.absolute_name(),
            sources=list(plan.sources),
            include_dirs=list(plan.include_paths),
            extra_compile_args=compile_args,
            extra_link_args=list(plan.ldflags),
        )

    def _load_uncached(self, plan: BuildPlan) -> ModuleType:
        """Import a finished build from disk, building it first (under a file lock) if needed.

        A cached library that does not load (truncated by a full disk, a killed copy) is
        rebuilt once, with a warning; a read-only cache that holds a good build still loads.
        """
        if is_built(plan):
            try:
                return _import_extension(plan)
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
            raise BuildToolMissingError(f"cannot build op {self.NAME!r}: {problem}")
        build_directory = _usable_build_directory(plan)
        with _exclusive_file_lock(build_directory / _LOCK_FILE):
            reason = _build_reason(plan)
            if is_built(plan):  # another process finished (or repaired) it while we waited
                try:
                    return _import_extension(plan)
                except _LibraryDoesNotLoad as failed:
                    reason = f"the cached library does not load ({failed.loader_message})"
                    _discard_build(build_directory)
            shared = f", library {plan.library}" if plan.library != plan.op_name else ""
            announce(
                f"building op {plan.op_name!r} ({plan.builder}{shared}): {reason}; this takes a "
                f"while once, then it is cached in {plan.build_directory}"
            )
            started = time.perf_counter()
            module = _compile(plan)
            elapsed = time.perf_counter() - started
            _write_stamp(plan, elapsed)
        announce(f"built op {plan.op_name!r} in {elapsed:.1f} s")
        return module


class _LibraryDoesNotLoad(Exception):
    """The loader refused a cached library; carries its message."""

    def __init__(self, loader_message: str) -> None:
        super().__init__(loader_message)
        self.loader_message = loader_message


def _build_reason(plan: BuildPlan) -> str:
    """Why ``plan`` must be built: first use, or a cached build of the op no longer matches."""
    build_directory = Path(plan.build_directory)
    try:
        older = sorted(
            path.name
            for path in build_directory.parent.glob(f"anyaccel_{plan.library}_*")
            if path.name != plan.extension_name and (path / _STAMP_FILE).exists()
        )
    except OSError:
        older = []
    if older:
        return (
            f"the cached build ({', '.join(older[:2])}) no longer matches its sources, flags, "
            "torch or compiler"
        )
    if (build_directory / _STAMP_FILE).exists():
        return "the cached build no longer matches its sources, flags, torch or compiler"
    return "first use (nothing cached yet)"


def _usable_build_directory(plan: BuildPlan) -> Path:
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


def _discard_build(build_directory: Path) -> None:
    """Delete a build that does not load (all but the lock we hold), so it builds from scratch."""
    for entry in build_directory.iterdir():
        if entry.name == _LOCK_FILE:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


@contextlib.contextmanager
def _exclusive_file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path``; the OS releases it if the process dies."""
    with open(path, "a+", encoding="utf-8") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _compile(plan: BuildPlan) -> ModuleType:
    """Run torch's ninja-based JIT build for ``plan``; raise ``OpBuildError`` with the log."""
    from torch.utils import cpp_extension

    # torch's own FileBaton lock is left behind by a killed build and would block forever;
    # we hold the directory's flock, so no live build owns it.
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(plan.build_directory, "lock"))
    try:
        module = cpp_extension.load(
            name=plan.extension_name,
            sources=list(plan.sources),
            extra_cflags=list(plan.cflags),
            extra_cuda_cflags=list(plan.cuda_cflags) or None,
            extra_ldflags=list(plan.ldflags),
            extra_include_paths=list(plan.include_paths),
            build_directory=plan.build_directory,
            verbose=False,
            with_cuda=plan.with_cuda,
            is_python_module=True,
        )
    except ImportError as exc:  # built, but the loader refuses the library
        if not os.path.exists(plan.library_path):
            # torch skips a build it already attempted in this process, then imports nothing
            raise OpBuildError(
                f"building op {plan.op_name!r} ({plan.extension_name}) produced no library "
                f"(an earlier build of it in this process failed; see {plan.log_path}); "
                "fix the cause and start a new process"
            ) from exc
        raise OpLoadError(
            f"op {plan.op_name!r} was built but its library {plan.library_path} does not load: "
            f"{exc}; delete {plan.build_directory} and retry, and report it if it persists",
            library_path=plan.library_path,
            loader_message=str(exc),
        ) from exc
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        output = str(exc)
        Path(plan.log_path).write_text(output + "\n", encoding="utf-8")
        excerpt = "\n".join("    " + line for line in first_error_lines(output))
        raise OpBuildError(
            f"building op {plan.op_name!r} ({plan.extension_name}) failed:\n{excerpt}\n"
            f"full log: {plan.log_path}"
        ) from exc
    if not isinstance(module, ModuleType):
        raise OpBuildError(f"building op {plan.op_name!r} produced no Python module")
    return module


def _write_stamp(plan: BuildPlan, seconds: float) -> None:
    """Record a finished build atomically, so readers never see a half-written one."""
    stamp = Path(plan.build_directory) / _STAMP_FILE
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


def _import_extension(plan: BuildPlan) -> ModuleType:
    """Import a finished build's shared library directly (the fast, subprocess-free path).

    Raises ``_LibraryDoesNotLoad`` with the loader's message when the library is unusable.
    """
    import torch  # noqa: F401  # the library links against libtorch, which must be loaded first

    problem = _library_problem(plan)
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


def _library_problem(plan: BuildPlan) -> str | None:
    """Why the cached library would not load, found before the loader touches it, or ``None``.

    The loader maps a truncated library and dies with SIGBUS on the missing pages, so the size
    recorded at build time and the ELF headers' extents are checked first (reads < 4 KiB).
    """
    try:
        size = os.path.getsize(plan.library_path)
        recorded = json.loads((Path(plan.build_directory) / _STAMP_FILE).read_text("utf-8"))
        with open(plan.library_path, "rb") as library:
            header = library.read(64)
            expected = recorded.get("library_bytes")
            if isinstance(expected, int) and size != expected:
                return f"file too short or changed: {size} bytes, the build wrote {expected}"
            return _elf_problem(library, header, size)
    except (OSError, ValueError) as exc:
        return f"cannot read the cached library: {exc}"


def _elf_problem(library: io.BufferedReader, header: bytes, size: int) -> str | None:
    """Whether an ELF file's section table and loadable segments end within its ``size``."""
    if header[:4] != b"\x7fELF":
        return None  # not ELF (e.g. Mach-O): the recorded size is the only check
    if len(header) < 52:
        return f"file too short: {size} bytes is less than an ELF header"
    order = "<" if header[5] == 1 else ">"
    if header[4] == 2:  # 64-bit
        phoff, shoff = struct.unpack_from(order + "QQ", header, 32)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", header, 54)
        segment, fields = order + "IIQQQQ", (0, 2, 5)  # p_type, p_offset, p_filesz
    else:
        phoff, shoff = struct.unpack_from(order + "II", header, 28)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", header, 42)
        segment, fields = order + "IIIIII", (0, 1, 4)
    table_end = shoff + shentsize * shnum
    if table_end > size:
        return f"file too short: {size} bytes, its ELF section table ends at {table_end}"
    library.seek(phoff)
    table = library.read(phentsize * phnum)
    for index in range(phnum):
        entry = table[index * phentsize : (index + 1) * phentsize]
        if len(entry) < struct.calcsize(segment):
            return f"file too short: {size} bytes, its ELF program headers are cut"
        values = struct.unpack_from(segment, entry)
        kind, offset, filesz = (values[field] for field in fields)
        if kind == 1 and offset + filesz > size:  # PT_LOAD
            return f"file too short: {size} bytes, a loadable segment ends at {offset + filesz}"
    return None
