"""Fixtures for the DeepSpeed hand-over tests: a DeepSpeed interpreter, or a simulated DeepSpeed.

Real DeepSpeed is found through ``ANYACCEL_DEEPSPEED_PYTHON`` (an interpreter with DeepSpeed
installed, such as the venv ``.ci/run`` builds) or in this interpreter; tests that need it
are skipped when neither has it. The simulated DeepSpeed is a few files with DeepSpeed's ABC
module path and ``set_accelerator`` check, so the import-order logic is tested everywhere.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import anyaccel

#: anyaccel's source tree, put on the child's PYTHONPATH so every interpreter imports this one.
ANYACCEL_SRC = str(Path(anyaccel.__file__).resolve().parents[1])

_FAKE_ABC = '''
import abc

class DeepSpeedAccelerator(abc.ABC):
    """Stand-in for deepspeed.accelerator.abstract_accelerator.DeepSpeedAccelerator."""

    @abc.abstractmethod
    def device_name(self, device_index=None): ...
'''

_FAKE_REAL = """
from deepspeed.accelerator.abstract_accelerator import DeepSpeedAccelerator as dsa2

ds_accelerator = None

def set_accelerator(accel_obj):
    global ds_accelerator
    if not isinstance(accel_obj, dsa2):
        raise AssertionError(
            f"{accel_obj.__class__.__name__} accelerator is not subclass of DeepSpeedAccelerator")
    ds_accelerator = accel_obj

def get_accelerator():
    return ds_accelerator
"""


def ours_then_this_runs_path() -> str:
    """A same-interpreter child's ``PYTHONPATH``: this anyaccel, then this run's own entries.

    This run's may put another Lightning first than the installed one (``.ci/run``'s oldest,
    ``tools/lightning_main.sh``'s main): the children must import the one the parent did.
    """
    return os.pathsep.join(p for p in (ANYACCEL_SRC, os.environ.get("PYTHONPATH", "")) if p)


def finish_launch(
    process: subprocess.Popen[bytes], log: Path, what: str, timeout: float = 900
) -> str:
    """Wait for a launched job (killed after ``timeout`` s); its log once it exits 0, else fail
    naming it, with the log's end."""
    try:
        code: int | None = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        code = None
    output = log.read_text()
    assert code == 0, f"{what}: exit {code} (None: timed out)\n{output[-4000:]}"
    return output


def deepspeed_python() -> str | None:
    """An interpreter that can import DeepSpeed, or ``None``."""
    configured = os.environ.get("ANYACCEL_DEEPSPEED_PYTHON")
    if configured:
        return configured
    if importlib.util.find_spec("deepspeed") is not None:
        return sys.executable
    return None


def child_env() -> dict[str, str]:
    """The environment of a DeepSpeed child: this anyaccel, no forced backend, a lasting JIT cache.

    ``ANYACCEL_DEEPSPEED_EXTENSIONS_DIR`` (set by ``.ci/run``) becomes the child's
    ``TORCH_EXTENSIONS_DIR``, so the ops DeepSpeed builds just in time are built once.
    """
    env = dict(os.environ, PYTHONPATH=ANYACCEL_SRC)
    env.pop("DS_ACCELERATOR", None)
    extensions = os.environ.get("ANYACCEL_DEEPSPEED_EXTENSIONS_DIR")
    if extensions:
        env["TORCH_EXTENSIONS_DIR"] = trusted_extensions_dir(Path(extensions))
    return env


def trusted_extensions_dir(root: Path) -> str:
    """The directory under ``root`` that passes anyaccel's cache trust rule (made if missing).

    DeepSpeed's own ops build through torch's JIT, which checks no owner, mode or link, so its
    children get the directory anyaccel itself would build in: ``root`` when only this user may
    write it, else the private ``root/anyaccel-<uid>``. Raises ``UntrustedCacheError`` for a
    root another user owns.
    """
    from anyaccel.ops.jit.trust import build_home, open_home

    os.close(open_home(root, create=True))
    return str(build_home(root))


def run_python(
    python: str, code: str, *, paths: tuple[str, ...] = (), timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh ``python`` with anyaccel (and ``paths``) importable; must succeed."""
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join((*paths, ANYACCEL_SRC))
    result = subprocess.run(
        [python, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture
def simulated_deepspeed(tmp_path: Path) -> str:
    """A directory holding a minimal ``deepspeed`` package with DeepSpeed's ABC check."""
    package = tmp_path / "deepspeed" / "accelerator"
    package.mkdir(parents=True)
    (tmp_path / "deepspeed" / "__init__.py").write_text("")
    (package / "__init__.py").write_text(
        "from deepspeed.accelerator.real_accelerator import set_accelerator, get_accelerator\n"
    )
    (package / "abstract_accelerator.py").write_text(_FAKE_ABC)
    (package / "real_accelerator.py").write_text(_FAKE_REAL)
    return str(tmp_path)


@pytest.fixture(scope="session")
def ds_python() -> str:
    """An interpreter with DeepSpeed installed (skips the test where there is none)."""
    python = deepspeed_python()
    if python is None:
        pytest.skip("DeepSpeed is not installed (set ANYACCEL_DEEPSPEED_PYTHON to a venv's python)")
    return python


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that runs DeepSpeed carries the ``deepspeed`` marker (``-m deepspeed``)."""
    for item in items:
        if "ds_python" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.deepspeed)
