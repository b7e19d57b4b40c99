"""examples/device_bugs: each bug is silent on the CPU, fails on the emulated device; fixed, passes.

Every script runs under one driver process per accelerator (a fresh process per script would
cost the gate a minute of interpreter starts): on the CPU (``DS_ACCELERATOR=cpu``), and on an
emulated NPU through the simulated ``torch_npu`` (``python -m anyaccel.testing.simulated npu:1``),
so the vendor's own backend drives the device. One script also runs alone, as the README says
users run it (``DS_ACCELERATOR=emulated ANYACCEL_EMULATED=emu:1``).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from anyaccel.emulated.state import MINIMUM_TORCH

CORPUS = Path(__file__).resolve().parents[1] / "examples" / "device_bugs"
SOURCE = Path(__file__).resolve().parents[1] / "src"
BUGS = sorted(path.stem for path in CORPUS.glob("*.py") if not path.stem.endswith("_fixed"))
TIMEOUT = 600
#: Bugs the emulated device cannot show yet (none: it refuses a CPU generator as CUDA does).
EMULATION_GAPS: set[str] = set()

#: The emulated device needs a torch whose PrivateUse1 interfaces its native core is built on.
needs_emulated_device = pytest.mark.skipif(
    tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2]) < MINIMUM_TORCH,
    reason=f"the emulated device needs torch >= {MINIMUM_TORCH[0]}.{MINIMUM_TORCH[1]}",
)

#: Runs every script of the corpus as ``__main__`` in turn; writes each outcome to a JSON file.
DRIVER = """
import contextlib, io, json, runpy, sys, traceback
outcomes = {}
for path in sys.argv[2:]:
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(path, run_name="__main__")
        outcomes[path] = {"error": None, "stdout": out.getvalue()}
    except Exception as error:
        last = traceback.format_exception_only(type(error), error)[-1].strip()
        outcomes[path] = {"error": last, "stdout": out.getvalue()}
with open(sys.argv[1], "w") as file:
    json.dump(outcomes, file)
"""


def expected_error(bug: str) -> str:
    """The script's ``EXPECTED_ERROR``: the text a GPU's error holds."""
    tree = ast.parse((CORPUS / f"{bug}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "EXPECTED_ERROR":
            return str(ast.literal_eval(node.value))
    raise AssertionError(f"{bug}.py declares no EXPECTED_ERROR")


def _env(accelerator: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "ANYACCEL_EMULATED")}
    env.update(PYTHONPATH=str(SOURCE), OMP_NUM_THREADS="1")
    if accelerator is not None:
        env["DS_ACCELERATOR"] = accelerator
    return env


def run(script: str, accelerator: str) -> subprocess.CompletedProcess[str]:
    """One script alone, as a user runs it."""
    env = _env(accelerator)
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


def _drive(tmp: Path, prefix: list[str], accelerator: str | None) -> dict[str, dict[str, Any]]:
    """Every bug and fixed script under one driver process; outcomes by script stem."""
    scripts = [str(CORPUS / f"{name}.py") for bug in BUGS for name in (bug, f"{bug}_fixed")]
    driver, out = tmp / "driver.py", tmp / "outcomes.json"
    driver.write_text(DRIVER)
    result = subprocess.run(
        [sys.executable, *prefix, str(driver), str(out), *scripts],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=_env(accelerator),
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return {Path(path).stem: outcome for path, outcome in json.loads(out.read_text()).items()}


@pytest.fixture(scope="module")
def on_cpu(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return _drive(tmp_path_factory.mktemp("cpu"), [], "cpu")


@pytest.fixture(scope="module")
def on_npu(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    runner = ["-m", "anyaccel.testing.simulated", "npu:1"]
    return _drive(tmp_path_factory.mktemp("npu"), runner, None)


def test_the_corpus_has_ten_kinds_of_bug_each_with_its_fixed_twin() -> None:
    assert len(BUGS) >= 10
    for bug in BUGS:
        assert (CORPUS / f"{bug}_fixed.py").is_file(), bug
        assert "get_accelerator" in (CORPUS / f"{bug}.py").read_text()
        expected_error(bug)


@pytest.mark.slow
@pytest.mark.parametrize("bug", BUGS)
def test_the_bug_is_silent_on_the_cpu(bug: str, on_cpu: dict[str, dict[str, Any]]) -> None:
    assert on_cpu[bug]["error"] is None, on_cpu[bug]


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
def test_the_bug_fails_on_an_emulated_npu_as_on_a_gpu(
    bug: str, on_npu: dict[str, dict[str, Any]]
) -> None:
    error = on_npu[bug]["error"]
    assert error is not None, f"{bug}.py passed on the NPU:\n{on_npu[bug]['stdout']}"
    # A stale read (read_before_sync) fails in the script's own arithmetic, as on a GPU.
    assert error.startswith(("RuntimeError:", "TypeError:", "ZeroDivisionError:")), error
    assert expected_error(bug) in error, error


@pytest.mark.slow
@pytest.mark.parametrize("bug", BUGS)
@pytest.mark.parametrize("accelerator", ["cpu", pytest.param("npu", marks=needs_emulated_device)])
def test_the_fixed_script_passes_on_both(
    bug: str, accelerator: str, request: pytest.FixtureRequest
) -> None:
    outcomes: dict[str, dict[str, Any]] = request.getfixturevalue(f"on_{accelerator}")
    fixed = outcomes[f"{bug}_fixed"]
    assert fixed["error"] is None, fixed
    assert fixed["stdout"].strip(), "the fixed script printed nothing"


@pytest.mark.slow
@needs_emulated_device
def test_a_script_alone_fails_as_the_readme_says_and_its_twin_passes() -> None:
    bug = "batch_not_moved"
    failed, passed = run(bug, "emulated"), run(f"{bug}_fixed", "emulated")
    assert failed.returncode != 0 and expected_error(bug) in failed.stderr, failed.stderr[-2000:]
    assert passed.returncode == 0 and passed.stdout.strip(), passed.stderr[-2000:]
    assert run(bug, "cpu").returncode == 0
