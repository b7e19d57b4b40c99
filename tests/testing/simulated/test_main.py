"""``python -m anyaccel.testing.simulated``: a target that cannot run is one line, as in python.

Each case runs the real runner in a fresh process. The cases decided before the simulation is
installed (a missing script, a missing top-level module) install nothing; the others enter
the simulation first, as runpy would import the target's packages under it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from anyaccel.testing.emulated import MINIMUM_TORCH

SOURCE = Path(__file__).resolve().parents[3] / "src"
PROGRAM = "python -m anyaccel.testing.simulated"

#: The runner installs emulated devices, which need a torch whose PrivateUse1 they are built on.
needs_emulated_device = pytest.mark.skipif(
    tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2]) < MINIMUM_TORCH,
    reason=f"the emulated device needs torch >= {MINIMUM_TORCH[0]}.{MINIMUM_TORCH[1]}",
)


def _runner(*argv: str, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The runner with ``argv`` in a fresh process (``path`` first on its ``PYTHONPATH``)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "ANYACCEL_SIMULATED")}
    paths = [str(SOURCE), *([str(path)] if path is not None else []), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return subprocess.run(
        [sys.executable, "-m", "anyaccel.testing.simulated", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=path,
        timeout=600,
    )


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The runner's only stderr line, after checking it exited 2 without a traceback."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "runpy" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_a_missing_script_is_one_line_naming_it(tmp_path: Path) -> None:
    script = tmp_path / "nowhere" / "train.py"
    line = _one_line(_runner("npu:2", str(script)))
    assert line == (
        f"{PROGRAM}: can't open file {str(script)!r}: [Errno 2] No such file or directory"
    )


def test_a_folder_without_main_is_one_line(tmp_path: Path) -> None:
    line = _one_line(_runner("npu:2", str(tmp_path)))
    assert line == f"{PROGRAM}: can't find '__main__' module in {str(tmp_path)!r}"


def test_a_missing_module_is_one_line_naming_it() -> None:
    line = _one_line(_runner("npu:2", "-m", "no_such_module_xyz"))
    assert line == f"{PROGRAM}: No module named no_such_module_xyz"


@needs_emulated_device
def test_a_missing_submodule_of_a_package_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "trainer_pkg").mkdir()
    (tmp_path / "trainer_pkg" / "__init__.py").write_text("")
    line = _one_line(_runner("npu:1", "-m", "trainer_pkg.no_such_module", path=tmp_path))
    assert line == f"{PROGRAM}: No module named trainer_pkg.no_such_module"


@needs_emulated_device
def test_a_submodule_of_a_plain_module_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "plain_module.py").write_text("")
    line = _one_line(_runner("npu:1", "-m", "plain_module.train", path=tmp_path))
    assert line == (
        f"{PROGRAM}: Error while finding module specification for 'plain_module.train' "
        "(ModuleNotFoundError: __path__ attribute not found on 'plain_module' while trying to "
        "find 'plain_module.train')"
    )


@needs_emulated_device
def test_a_package_without_main_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "trainer_pkg").mkdir()
    (tmp_path / "trainer_pkg" / "__init__.py").write_text("")
    line = _one_line(_runner("npu:1", "-m", "trainer_pkg", path=tmp_path))
    assert line == (
        f"{PROGRAM}: No module named trainer_pkg.__main__; 'trainer_pkg' is a package and "
        "cannot be directly executed"
    )


@needs_emulated_device
def test_a_module_whose_own_import_fails_keeps_its_traceback(tmp_path: Path) -> None:
    # The program's own error (a dependency it lacks) is not the runner's to shorten.
    (tmp_path / "needs_a_dependency.py").write_text("import no_such_dependency_xyz\n")
    done = _runner("npu:1", "-m", "needs_a_dependency", path=tmp_path)
    assert done.returncode == 1
    assert "Traceback" in done.stderr
    assert "No module named 'no_such_dependency_xyz'" in done.stderr
