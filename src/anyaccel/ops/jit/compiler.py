"""One compile: torch's ninja-based JIT build of a ``BuildPlan``, its errors made readable."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from pathlib import Path
from types import ModuleType

from anyaccel.ops.errors import OpBuildError, OpLoadError
from anyaccel.ops.jit.plan import BuildPlan


def first_error_lines(output: str, limit: int = 8) -> list[str]:
    """The compiler's first error and the lines after it (or the output's tail if none match)."""
    lines = [line for line in output.splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if re.search(r"\b(fatal )?error\b", line, re.IGNORECASE) and not line.startswith(
            ("Error building extension", "FAILED:", "ninja: build stopped")
        ):
            return lines[index : index + limit]
    return lines[-limit:]


def compile_extension(plan: BuildPlan) -> ModuleType:
    """Run torch's ninja-based JIT build for ``plan``; raise ``OpBuildError`` with the log.

    The caller holds the build directory's file lock. A library that builds but does not load
    raises ``OpLoadError``.
    """
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
