"""The ``OpBuilder`` API: a native op's sources and flags, built and loaded just in time.

Subclasses say what to build; the JIT machinery in ``anyaccel.ops.jit`` does the rest. A build
is identified by a hash of everything that affects its output (source contents, flags, torch
and Python versions, the compiler named by ``CXX``), so the compiled artefact under
``TORCH_EXTENSIONS_DIR`` is reused across processes and a cached load imports it directly:
no compiler probe, no subprocess.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar

from anyaccel.forksafe import ForkSafeLock
from anyaccel.ops.errors import OpLoadError, OpNotAvailableError
from anyaccel.ops.jit.announce import announce, logger
from anyaccel.ops.jit.cache import load_or_build
from anyaccel.ops.jit.compiler import first_error_lines
from anyaccel.ops.jit.key import build_key
from anyaccel.ops.jit.plan import EXTENSIONS_DIR_ENV, BuildPlan, extensions_root, is_built
from anyaccel.ops.jit.toolchain import cxx_compiler, find_ninja, toolchain_problem
from anyaccel.ops.jit.trust import build_home

__all__ = [
    "EXTENSIONS_DIR_ENV",
    "BuildPlan",
    "Compatibility",
    "OpBuilder",
    "announce",
    "cxx_compiler",
    "extensions_root",
    "find_ninja",
    "first_error_lines",
    "is_built",
    "logger",
    "toolchain_problem",
]

#: Ops loaded in this process, by build key (a cached load after the first costs a dict lookup).
_loaded: dict[str, ModuleType] = {}
_load_lock = ForkSafeLock(reentrant=True)  # a fork mid-load must not leave it held


@dataclass(frozen=True)
class Compatibility:
    """Whether an op can be built here, and if not, why (with the remedy)."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


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
        key = build_key(
            self.NAME,
            library,
            sources + depends,
            (include_paths, cflags, cuda_cflags, ldflags),
            with_cuda=self.with_cuda(),
        )
        extension_name = f"anyaccel_{library}_{key[:12]}"
        return BuildPlan(
            op_name=self.NAME,
            builder=type(self).__name__,
            library=library,
            extension_name=extension_name,
            build_directory=str(build_home(extensions_root()) / extension_name),
            sources=sources,
            depends=depends,
            include_paths=include_paths,
            cflags=cflags,
            cuda_cflags=cuda_cflags,
            ldflags=ldflags,
            with_cuda=self.with_cuda(),
            key=key,
        )

    # --- building and loading --------------------------------------------------------------
    def load(self, verbose: bool = False) -> ModuleType:
        """The compiled module: from this process's cache, the on-disk cache, or a fresh build.

        Raises ``OpNotAvailableError`` when the op cannot run here (wrong backend, a forced SIMD
        level this CPU lacks), ``BuildToolMissingError`` when a build is needed and a tool is
        missing, ``ExtensionsDirError`` when the cache directory is unusable (its subclass
        ``UntrustedCacheError`` when it could hold another user's code), ``OpBuildError``
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
                    module = load_or_build(plan)
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
