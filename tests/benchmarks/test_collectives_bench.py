"""benchmarks/collectives.py --quick: the all_reduce table side by side, with and without DeepSpeed.

No timing is asserted (the host is shared): only that every contender ran, its result matched
gloo's (the script exits otherwise), and the table has every row and ratio.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "collectives.py"
HEADER = (
    "| dtype | size | gloo us | ours us | DeepSpeed us | floor us | DS/ours | gloo/ours | "
    "ours/floor |"
)
ROWS = [("float32", "16 KiB"), ("float32", "1 MiB"), ("bfloat16", "16 KiB"), ("bfloat16", "1 MiB")]


def run_quick(python: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    env.pop("DS_ACCELERATOR", None)
    return subprocess.run(
        [python, str(SCRIPT), "--quick", *extra],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )


BREAKDOWN = (
    "| dtype | size | dist.all_reduce us | ProcessGroup.allreduce us | Backend.allreduce us | "
    "kernel us | DeepSpeed us |"
)


def table(stdout: str, header: str = HEADER) -> list[list[str]]:
    """A table's rows, split into cells (its header line checked first)."""
    lines = stdout.splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("| "):
            break
        rows.append([cell.strip() for cell in line.strip(" |").split(" | ")])
    return rows


def deepspeed_segments() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith("deepspeed_allreduce")}


@pytest.mark.slow
def test_quick_run_without_deepspeed_times_gloo_ours_and_the_floor() -> None:
    if importlib.util.find_spec("deepspeed") is not None:
        pytest.skip("this interpreter has DeepSpeed: the DeepSpeed test covers it")
    done = run_quick(sys.executable, "--load", "1", "--breakdown")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "load: 1 busy processes" in done.stdout
    assert "DeepSpeed: DeepSpeed is not importable here" in done.stdout
    rows = table(done.stdout)
    assert [(row[0], row[1]) for row in rows] == ROWS
    for row in rows:
        gloo, ours, deepspeed, floor = row[2:6]
        assert all(" (" in value and value.endswith(")") for value in (gloo, ours, floor)), row
        assert deepspeed == "-" and row[6] == "-", row  # no DeepSpeed: no column, no ratio
        assert row[7].endswith("x") and row[8].endswith("x"), row
    assert "DDP step" not in done.stdout  # --quick leaves out part 2
    layers = table(done.stdout, BREAKDOWN)  # each layer of torch's path timed, DeepSpeed absent
    assert [(row[0], row[1]) for row in layers] == ROWS
    for row in layers:
        assert all(" (" in value and value.endswith(")") for value in row[2:6]), row
        assert row[6] == "-", row


@pytest.mark.slow
@pytest.mark.deepspeed
def test_quick_run_times_deepspeeds_own_shared_memory_all_reduce_and_cleans_up() -> None:
    python = os.environ.get("ANYACCEL_DEEPSPEED_PYTHON") or (
        sys.executable if importlib.util.find_spec("deepspeed") is not None else None
    )
    if python is None:
        pytest.skip("DeepSpeed is not installed (set ANYACCEL_DEEPSPEED_PYTHON to one that has it)")
    before = deepspeed_segments()
    done = run_quick(python, "--breakdown")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "DeepSpeed: ShareMemCommBuilder, vector_kernel_level" in done.stdout
    level = int(done.stdout.split("vector_kernel_level ")[1].split()[0])
    rows = table(done.stdout)
    assert [(row[0], row[1]) for row in rows] == ROWS
    for row in rows:
        ran = level >= (1 if row[0] == "float32" else 2)  # what DeepSpeed's TorchBackend asks
        assert (row[4] != "-") == ran and row[6].endswith("x") == ran, row
    assert "result differs from gloo's" not in done.stdout
    for row in table(done.stdout, BREAKDOWN):  # DeepSpeed's op beside torch's layers
        ran = level >= (1 if row[0] == "float32" else 2)
        assert (row[6] != "-") == ran and row[2] != "-", row
    # DeepSpeed leaves its 66 MiB segments in /dev/shm; the benchmark removes them
    assert deepspeed_segments() - before == set()
