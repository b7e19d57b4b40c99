"""examples/device_bugs: each bug is silent on the CPU, fails on the emulated device; fixed, passes.

Every script runs as a user runs it: its own process, with a timeout, the accelerator chosen by
``DS_ACCELERATOR`` (``cpu``, or ``emulated`` with ``ANYACCEL_EMULATED=emu:1``).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from anyaccel.ops.emulated.runtime import MINIMUM_TORCH

CORPUS = Path(__file__).resolve().parents[1] / "examples" / "device_bugs"
SOURCE = Path(__file__).resolve().parents[1] / "src"
BUGS = sorted(path.stem for path in CORPUS.glob("*.py") if not path.stem.endswith("_fixed"))
TIMEOUT = 300
#: Bugs the emulated device cannot show yet (none: it refuses a CPU generator as CUDA does).
EMULATION_GAPS: set[str] = set()

#: The emulated device needs a torch whose PrivateUse1 interfaces its native core is built on.
needs_emulated_device = pytest.mark.skipif(
    tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2]) < MINIMUM_TORCH,
    reason=f"the emulated device needs torch >= {MINIMUM_TORCH[0]}.{MINIMUM_TORCH[1]}",
)


def expected_error(bug: str) -> str:
    """The script's ``EXPECTED_ERROR``: the text a GPU's error holds."""
    tree = ast.parse((CORPUS / f"{bug}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "EXPECTED_ERROR":
            return str(ast.literal_eval(node.value))
    raise AssertionError(f"{bug}.py declares no EXPECTED_ERROR")


def run(script: str, accelerator: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "ANYACCEL_EMULATED")}
    env.update(DS_ACCELERATOR=accelerator, PYTHONPATH=str(SOURCE), OMP_NUM_THREADS="1")
    if accelerator == "emulated":
        env["ANYACCEL_EMULATED"] = "emu:1"
    return subprocess.run(
        [sys.executable, str(CORPUS / f"{script}.py")],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
        check=False,
    )


def test_the_corpus_has_ten_kinds_of_bug_each_with_its_fixed_twin() -> None:
    assert len(BUGS) >= 10
    for bug in BUGS:
        assert (CORPUS / f"{bug}_fixed.py").is_file(), bug
        assert "get_accelerator" in (CORPUS / f"{bug}.py").read_text()
        expected_error(bug)


@pytest.mark.slow
@pytest.mark.parametrize("bug", BUGS)
def test_the_bug_is_silent_on_the_cpu(bug: str) -> None:
    result = run(bug, "cpu")
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.slow
@needs_emulated_device
@pytest.mark.parametrize(
    "bug",
    [
        pytest.param(bug, marks=pytest.mark.xfail(strict=True, reason="the emulation's gap"))
        if bug in EMULATION_GAPS
        else bug
        for bug in BUGS
    ],
)
def test_the_bug_fails_on_the_emulated_device_as_on_a_gpu(bug: str) -> None:
    result = run(bug, "emulated")
    assert result.returncode != 0, f"{bug}.py passed on the emulated device:\n{result.stdout}"
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(("RuntimeError:", "TypeError:")), result.stderr[-2000:]
    assert expected_error(bug) in last, result.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("bug", BUGS)
@pytest.mark.parametrize(
    "accelerator", ["cpu", pytest.param("emulated", marks=needs_emulated_device)]
)
def test_the_fixed_script_passes_on_both(bug: str, accelerator: str) -> None:
    result = run(f"{bug}_fixed", accelerator)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip(), "the fixed script printed nothing"
