"""benchmarks/gpu.py without a GPU: it says why it measured nothing and exits 0."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

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


def load_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_benchmark", REPO / "benchmarks" / "gpu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FIGURES = {
    "hot_calls": [{"call": "current_stream()", "anyaccel_ns": 300.0, "torch_ns": 200.0}],
    "copy_gbs": 2000.0,
    "fused_adam": [
        {
            "dtype": "float32",
            "anyaccel_ms": 3.0,
            "torch_ms": 2.0,
            "anyaccel_fraction_of_copy": 0.5,
            "torch_fraction_of_copy": 0.75,
        }
    ],
    "host_copies": [
        {
            "direction": "host-to-device",
            "anyaccel_gbs": 25.0,
            "torch_gbs": 25.0,
            "pageable_gbs": 10.0,
        }
    ],
    "offload": [{"parameters": 1000, "serial_ms": 10.0, "overlapped_ms": 8.0}],
}


def test_tables_put_each_figure_beside_its_baseline_with_the_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    load_benchmark().print_tables(FIGURES)
    out = capsys.readouterr().out
    assert "| current_stream() | 300.0 | 200.0 | 1.50x |" in out
    assert "# Fused Adam on GPT-2 small (copy bandwidth 2000 GB/s)" in out
    assert "| float32 | 3.000 | 2.000 | 1.50x | 50% | 75% |" in out
    assert "| host-to-device | 25.0 | 25.0 | 10.0 | 1.00x |" in out
    assert "| 1000 | 10.00 | 8.00 | 0.80x |" in out
