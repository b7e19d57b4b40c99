"""Compiling: the compiler's first errors in the message, the full output in the build log."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from anyaccel.ops.errors import OpBuildError
from anyaccel.ops.jit.compiler import first_error_lines
from anyaccel.ops.jit.plan import is_built

from ..test_builder import BROKEN_SOURCE, tmp_builder


def test_first_error_lines_picks_the_compiler_error() -> None:
    output = "ninja: build\nFAILED: a.o\nx.cpp:3:1: error: bad thing\n  3 | code\n    ^\n"
    assert first_error_lines(output)[0] == "x.cpp:3:1: error: bad thing"
    assert first_error_lines("no match here\nlast line") == ["no match here", "last line"]


def test_compile_error_shows_the_first_compiler_errors_and_the_log_path(tmp_path: Path) -> None:
    broken = tmp_builder(tmp_path, BROKEN_SOURCE, name="broken_op")
    with pytest.raises(OpBuildError) as caught:
        broken.load()
    message = str(caught.value)
    assert "undefined_symbol_here" in message and "error" in message
    log_path = broken.plan().log_path
    assert f"full log: {log_path}" in message
    assert "undefined_symbol_here" in Path(log_path).read_text()
    assert not is_built(broken.plan())


def test_a_second_load_after_a_failed_build_says_the_build_failed(tmp_path: Path) -> None:
    """torch skips a build it already tried in this process; that is no 'library does not load'."""
    broken = tmp_builder(tmp_path, BROKEN_SOURCE, name="broken_twice_op")
    with pytest.raises(OpBuildError):
        broken.load()
    with pytest.raises(OpBuildError) as caught:
        broken.load()
    message = str(caught.value)
    assert "broken_twice_op" in message
    assert "failed" in message and "does not load" not in message


_IMPORT_CPP_EXTENSION = """
import logging, sys
import torch
logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
# torch's CUDA wheel on a machine without a GPU (pip's default torch on a CPU-only CI runner)
torch.cuda._is_compiled = lambda: True
torch.cuda.is_available = lambda: False
torch.version.cuda = torch.version.cuda or "13.0"
if sys.argv[1] == "ours":
    from anyaccel.ops.jit.compiler import cpp_extension_module
    print(cpp_extension_module().__name__)
else:
    from torch.utils import cpp_extension
    print(cpp_extension.__name__)
"""


def test_a_cuda_toolkit_without_a_gpu_is_not_announced_as_a_problem(tmp_path: Path) -> None:
    # torch logs "No CUDA runtime is found, using CUDA_HOME=..." when cpp_extension is imported
    # where a CUDA toolkit is installed but no GPU is: nothing is wrong for a CPU build
    (tmp_path / "cuda").mkdir()
    src = str(Path(__file__).resolve().parents[3] / "src")
    env = {**os.environ, "CUDA_HOME": str(tmp_path / "cuda"), "PYTHONPATH": src}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    said = {
        who: subprocess.run(
            [sys.executable, "-c", _IMPORT_CPP_EXTENSION, who],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        for who in ("torch", "ours")
    }
    assert "No CUDA runtime is found" in said["torch"].stderr  # what users saw
    assert said["ours"].returncode == 0, said["ours"].stderr
    assert said["ours"].stdout.strip() == "torch.utils.cpp_extension"
    assert "No CUDA runtime" not in said["ours"].stderr
