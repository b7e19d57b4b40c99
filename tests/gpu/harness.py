"""The GPU suite's shared pieces: the skip mark with its reason, and fresh child interpreters.

Every check in ``tests/gpu`` runs only where torch sees an NVIDIA GPU; elsewhere it is skipped
with the reason the CUDA probe gives (a CPU build of torch, no device, a hidden device), so
CI collects the suite and its time does not change.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

#: The checkout's ``src``: children import this anyaccel, not an installed one.
SRC = str(Path(__file__).resolve().parents[2] / "src")


def cuda_device_problem() -> str | None:
    """Why this process has no NVIDIA GPU to test, or ``None`` when it has one."""
    if torch.version.hip is not None:
        return f"torch {torch.__version__} is a ROCm build; this suite checks NVIDIA CUDA"
    from anyaccel.backends.cuda import probe

    outcome = probe()
    if not outcome.device_count:  # None: the probe itself failed
        return outcome.reason
    return None


_PROBLEM = cuda_device_problem()

#: Put on every GPU test module as ``pytestmark = GPU``.
GPU = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        _PROBLEM is not None,
        reason=f"needs an NVIDIA GPU ({_PROBLEM}); run `python tools/gpu_proof.py` on one",
    ),
]


def child_env(**overrides: str | None) -> dict[str, str]:
    """This environment with the checkout's ``src`` first on ``PYTHONPATH``, plus ``overrides``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SRC, env.get("PYTHONPATH")]))
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run_python(
    code: str, timeout: float = 300, **env: str | None
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (this one's executable) with ``child_env(**env)``."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_module(
    *args: str, timeout: float = 300, **env: str | None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m <args>`` (e.g. the ``anyaccel`` CLI) in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-m", *args],
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def explain(done: subprocess.CompletedProcess[str]) -> str:
    """A failed child's exit status and output, for an assertion message."""
    return f"exit {done.returncode}\nstdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"
