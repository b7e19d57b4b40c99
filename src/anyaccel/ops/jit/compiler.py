"""One compile: torch's ninja-based JIT build of a ``BuildPlan``, its errors made readable."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import subprocess
from types import ModuleType
from typing import Any

from anyaccel.forksafe import ForkSafeLock
from anyaccel.ops.errors import OpBuildError, OpLoadError
from anyaccel.ops.jit.announce import logger
from anyaccel.ops.jit.plan import LOG_FILE, BuildPlan
from anyaccel.ops.jit.trust import descriptor_path

#: Build directories held open for the process's life, by (device, inode): torch's JIT builds
#: through ``/proc/self/fd/N`` of the checked directory, and N must not change between builds
#: of one directory (torch keys what it built in this process by the path).
_workspaces: dict[tuple[int, int], int] = {}
_workspaces_lock = ForkSafeLock()


def workspace(build_fd: int, build_directory: str) -> str:
    """The path torch's JIT builds ``build_fd`` through: the checked directory itself, whatever
    happens to the path it was opened by (``build_directory`` where there is no /proc)."""
    status = os.fstat(build_fd)
    with _workspaces_lock:
        held = _workspaces.get((status.st_dev, status.st_ino))
        if held is None:
            held = _workspaces[(status.st_dev, status.st_ino)] = os.dup(build_fd)
    return descriptor_path(held) or build_directory


def first_error_lines(output: str, limit: int = 8) -> list[str]:
    """The compiler's first error and the lines after it (or the output's tail if none match)."""
    lines = [line for line in output.splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if re.search(r"\b(fatal )?error\b", line, re.IGNORECASE) and not line.startswith(
            ("Error building extension", "FAILED:", "ninja: build stopped")
        ):
            return lines[index : index + limit]
    return lines[-limit:]


class _NoCudaRuntimeNote(logging.Filter):
    """Drops torch's "No CUDA runtime is found, using CUDA_HOME=..." (logged at a WARNING when
    ``torch.utils.cpp_extension`` is imported on a machine with a CUDA toolkit but no GPU).

    It says nothing wrong: anyaccel's CPU ops never use CUDA_HOME, and a CUDA op compiles with
    nvcc, which needs no GPU. It goes to anyaccel's logger at DEBUG instead.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("No CUDA runtime is found"):
            logger.debug("torch: %s (no GPU here; building needs none)", record.getMessage())
            return False
        return True


def cpp_extension_module() -> ModuleType:
    """``torch.utils.cpp_extension``, imported without its alarming no-CUDA-runtime warning."""
    torch_logger = logging.getLogger("torch.utils.cpp_extension")  # the one it logs through
    note = _NoCudaRuntimeNote()
    torch_logger.addFilter(note)
    try:
        from torch.utils import cpp_extension
    finally:
        torch_logger.removeFilter(note)
    return cpp_extension


def compile_extension(plan: BuildPlan, directory: str) -> ModuleType:
    """Run torch's ninja-based JIT build for ``plan`` in ``directory`` (its checked build
    directory, see ``workspace``); raise ``OpBuildError`` with the log.

    The caller holds the build directory's file lock. A library that builds but does not load
    raises ``OpLoadError``.
    """
    cpp_extension: Any = cpp_extension_module()

    # torch's own FileBaton lock is left behind by a killed build and would block forever;
    # we hold the directory's flock, so no live build owns it.
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(directory, "lock"))
    try:
        module = cpp_extension.load(
            name=plan.extension_name,
            sources=list(plan.sources),
            extra_cflags=list(plan.cflags),
            extra_cuda_cflags=list(plan.cuda_cflags) or None,
            extra_ldflags=list(plan.ldflags),
            extra_include_paths=list(plan.include_paths),
            build_directory=directory,
            verbose=False,
            with_cuda=plan.with_cuda,
            is_python_module=True,
        )
    except ImportError as exc:  # built, but the loader refuses the library
        if not os.path.exists(os.path.join(directory, f"{plan.extension_name}.so")):
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
        _write_log(os.path.join(directory, LOG_FILE), output)
        excerpt = "\n".join("    " + line for line in first_error_lines(output))
        raise OpBuildError(
            f"building op {plan.op_name!r} ({plan.extension_name}) failed:\n{excerpt}\n"
            f"full log: {plan.log_path}"
        ) from exc
    if not isinstance(module, ModuleType):
        raise OpBuildError(f"building op {plan.op_name!r} produced no Python module")
    return module


def _write_log(path: str, output: str) -> None:
    """Write a failed build's output, never through a link."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(path, flags, 0o644), "w", encoding="utf-8") as log:
        log.write(output + "\n")
