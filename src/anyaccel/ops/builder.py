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
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import ClassVar

from anyaccel.ops.errors import BuildToolMissingError, OpBuildError, OpNotAvailableError

#: Where compiled ops are cached (shared with torch's own JIT extensions).
EXTENSIONS_DIR_ENV = "TORCH_EXTENSIONS_DIR"
#: Bump when the layout of a build directory changes, to invalidate older caches.
_LAYOUT_VERSION = "1"
_STAMP_FILE = "anyaccel-build.json"
_LOG_FILE = "build.log"
_LOCK_FILE = "anyaccel.lock"

_loaded: dict[str, ModuleType] = {}
_load_lock = threading.RLock()


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
        """Flags for the C++ compiler."""
        return ["-O3", "-std=c++17"]

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
        key = self._build_key(sources + depends, include_paths, cflags, cuda_cflags, ldflags)
        extension_name = f"anyaccel_{self.NAME}_{key[:12]}"
        return BuildPlan(
            op_name=self.NAME,
            builder=type(self).__name__,
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

    def _build_key(self, files: tuple[str, ...], *flag_groups: tuple[str, ...]) -> str:
        """A hash of every input that changes the compiled artefact."""
        import torch

        digest = hashlib.sha256()
        context = [
            _LAYOUT_VERSION,
            self.NAME,
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
        """The compiled module: from this process's cache, the on-disk cache, or a fresh build."""
        plan = self.plan()
        with _load_lock:
            module = _loaded.get(plan.key)
            if module is None:
                module = self._load_uncached(plan, verbose)
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

    def _load_uncached(self, plan: BuildPlan, verbose: bool) -> ModuleType:
        """Import a finished build from disk, building it first (under a file lock) if needed."""
        platform_ok = self.platform_compatibility()
        if not platform_ok:
            raise OpNotAvailableError(f"op {self.NAME!r} cannot run here: {platform_ok.reason}")
        if is_built(plan):
            return _import_extension(plan)
        problem = toolchain_problem(plan.with_cuda)
        if problem is not None:
            raise BuildToolMissingError(f"cannot build op {self.NAME!r}: {problem}")
        build_directory = Path(plan.build_directory)
        build_directory.mkdir(parents=True, exist_ok=True)
        with _exclusive_file_lock(build_directory / _LOCK_FILE):
            if is_built(plan):  # another process finished it while we waited
                return _import_extension(plan)
            started = time.perf_counter()
            module = _compile(plan)
            _write_stamp(plan, time.perf_counter() - started)
        if verbose:
            elapsed = time.perf_counter() - started
            print(f"[anyaccel] built {plan.extension_name} in {elapsed:.1f} s", file=sys.stderr)
        return module


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
    except (RuntimeError, OSError, ImportError, subprocess.CalledProcessError) as exc:
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
    record = {"key": plan.key, "extension": plan.extension_name, "build_seconds": round(seconds, 2)}
    record["cflags"] = " ".join(plan.cflags)
    partial.write_text(json.dumps(record, indent=1), encoding="utf-8")
    os.replace(partial, stamp)


def _import_extension(plan: BuildPlan) -> ModuleType:
    """Import a finished build's shared library directly (the fast, subprocess-free path)."""
    import torch  # noqa: F401  # the library links against libtorch, which must be loaded first

    spec = importlib.util.spec_from_file_location(plan.extension_name, plan.library_path)
    if spec is None or spec.loader is None:
        raise OpBuildError(f"cannot import {plan.library_path}; delete {plan.build_directory}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        raise OpBuildError(
            f"cached build of op {plan.op_name!r} at {plan.library_path} does not import "
            f"({exc}); delete {plan.build_directory} to rebuild it"
        ) from exc
    return module
