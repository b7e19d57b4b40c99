"""The build tools torch's JIT needs (ninja, a C++ compiler, nvcc): found by PATH lookups only."""

from __future__ import annotations

import os
import shutil


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
