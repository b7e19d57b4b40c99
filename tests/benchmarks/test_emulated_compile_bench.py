"""benchmarks/emulated_compile.py compiles a training step on both devices and prints a ratio."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from anyaccel.emulated.inductor import inductor_unsupported_reason
from anyaccel.emulated.state import torch_problem

REPO = Path(__file__).resolve().parents[2]
REASON = torch_problem() or inductor_unsupported_reason()


def _run() -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    env.pop("DS_ACCELERATOR", None)
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    return subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "emulated_compile.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=1500,  # two inductor compiles (forward and backward graphs, C++ builds) each
        env=env,
    )


@pytest.mark.skipif(REASON is not None, reason=f"no device or no inductor for it here: {REASON}")
def test_quick_run_prints_the_compiled_mlp_with_a_ratio() -> None:
    done = _run()
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| model | cpu compile s | emu compile s |")
    assert [row.split(" | ")[0] for row in rows[1:]] == ["| MLP, 11.5M parameters, batch 64"]
    assert rows[1].rstrip(" |").endswith("x")


@pytest.mark.skipif(REASON is None, reason="the device and its inductor work here")
def test_without_inductor_for_the_device_it_says_so() -> None:
    done = _run()
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.startswith("skipped: inductor cannot compile")
