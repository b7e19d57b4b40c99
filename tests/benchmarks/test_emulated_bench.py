"""benchmarks/emulated.py runs on the emulated device and prints a table of ratios."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_prints_both_models_with_a_ratio() -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    env.pop("DS_ACCELERATOR", None)
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "emulated.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert rows[0] == (
        "| model | parameters | cpu ms/step | emu ms/step | ratio emu/cpu "
        "| strict ms/step | ratio strict/cpu | ratio strict/emu |"
    )
    assert [row.split(" | ")[0] for row in rows[1:]] == [
        "| MLP, 11.5M parameters, batch 64",
        "| GPT-2-small blocks x1, 4 x 128 tokens",
    ]
    for row in rows[1:]:  # the default mode against the CPU, strict memory against both
        ratios = [cell.strip() for cell in row.strip("| ").split(" | ")]
        assert ratios[4].endswith("x") and ratios[6].endswith("x") and ratios[7].endswith("x")
    assert "Warning" not in done.stderr
