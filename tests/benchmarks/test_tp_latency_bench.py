"""benchmarks/tp_latency.py --quick: the like-for-like table's rows, every result checked against
gloo's (the script exits otherwise). No timing is asserted (the host is shared)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "tp_latency.py"
HEADER = (
    "| dtype | size | dist.all_reduce us | ds.comm.inference_all_reduce us | DS/ours | "
    "anyaccel all_reduce us | ds op us | DS op/ours |"
)
ROWS = [(dtype, size) for dtype in ("float32", "bfloat16") for size in ("1 KiB", "16 KiB", "1 MiB")]


@pytest.mark.slow
def test_quick_run_prints_every_row_with_the_load() -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    env.pop("DS_ACCELERATOR", None)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "load average" in done.stdout and "after: load average" in done.stdout
    lines = done.stdout.splitlines()
    start = lines.index(HEADER)
    rows = [line.strip(" |").split(" | ") for line in lines[start + 2 : start + 2 + len(ROWS)]]
    assert [(row[0], row[1]) for row in rows] == ROWS
    with_deepspeed = importlib.util.find_spec("deepspeed") is not None
    for row in rows:
        ours = (row[2], row[5])
        assert all(" (" in value and value.endswith(")") for value in ours), row
        if not with_deepspeed:  # no DeepSpeed: its columns and ratios are "-"
            assert row[3] == row[4] == row[6] == row[7] == "-", row
