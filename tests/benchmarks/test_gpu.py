"""benchmarks/gpu.py without a GPU: it says why it measured nothing and exits 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_without_a_gpu_it_says_no_gpu_and_exits_0(tmp_path: Path) -> None:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    figures = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu.py"), "--quick", "--json", str(figures)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("no GPU: ") and "nothing measured" in done.stdout
    assert "|" not in done.stdout  # no table, so run_all reports no figures for it
    record = json.loads(figures.read_text())
    assert record["gpu"] is False and record["reason"]
