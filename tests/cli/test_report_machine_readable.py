"""``anyaccel report``'s machine-readable forms stay parseable whatever the environment does.

Real distributions (a ``.dist-info`` with ``entry_points.txt`` on ``PYTHONPATH``) provide a
torch device-backend autoload entry point that prints to stdout from Python and from C, or
one that raises; the CLI runs in a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from anyaccel.cli.environment import environment_report, format_markdown

SRC = Path(__file__).resolve().parents[2] / "src"
needs_autoload = pytest.mark.skipif(
    not hasattr(torch, "_import_device_backends"),
    reason="this torch has no device-backend autoload (torch >= 2.5 has)",
)


def _install_backend(site: Path, body: str) -> None:
    """A distribution ``noisybackend`` whose ``torch.backends`` entry point runs ``body``."""
    (site / "noisybackend").mkdir(parents=True)
    (site / "noisybackend" / "__init__.py").write_text(f"def autoload():\n{body}")
    info = site / "noisybackend-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: noisybackend\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[torch.backends]\nnoisy = noisybackend:autoload\n")


def run_report(
    *args: str, site: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    path = f"{SRC}{os.pathsep}{site}" if site else str(SRC)
    full_env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    return subprocess.run(
        [sys.executable, "-m", "anyaccel", "report", *args],
        capture_output=True,
        text=True,
        env={**full_env, "PYTHONPATH": path, **env},
        timeout=120,
    )


@needs_autoload
def test_json_stays_json_when_a_backend_prints_from_python_and_c(tmp_path: Path) -> None:
    _install_backend(
        tmp_path,
        "    import ctypes, os\n"
        "    print('hello from python')\n"
        "    os.write(1, b'hello from fd 1\\n')\n"
        "    ctypes.CDLL(None).printf(b'hello from printf\\n')\n",
    )
    result = run_report("--json", site=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["accelerator"]["name"] == "cpu"
    for line in ("hello from python", "hello from fd 1", "hello from printf"):
        assert line in data["captured_stdout"] and line in result.stderr


@needs_autoload
@pytest.mark.parametrize("form", ["text", "--json"])
def test_a_failing_backend_autoload_is_named_with_the_switch(tmp_path: Path, form: str) -> None:
    _install_backend(tmp_path, "    raise ImportError('libnoisy.so: cannot open shared object')\n")
    result = run_report(*([form] if form != "text" else []), site=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    for part in ("noisy = noisybackend:autoload", "TORCH_DEVICE_BACKEND_AUTOLOAD=0", "libnoisy"):
        assert part in result.stderr
    if form == "--json":
        assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in json.loads(result.stdout)["error"]
    switched_off = run_report("--json", site=tmp_path, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert switched_off.returncode == 0 and json.loads(switched_off.stdout)["accelerator"]


def test_markdown_table_survives_a_value_with_a_newline_and_a_pipe() -> None:
    result = run_report("--markdown", ANYACCEL_ODD_VALUE="a|b\nc | d\r\ne")
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ANYACCEL_ODD")]
    assert rows == ["| ANYACCEL_ODD_VALUE | a\\|b<br>c \\| d<br>e |"]
    table = result.stdout.split("\n\n")[1].splitlines()
    assert all(len(re.findall(r"(?<!\\)\|", line)) == 3 for line in table), table


_ODD_TEXT = st.text(alphabet=st.sampled_from("a|\\\n\r`<> -"), max_size=12)


@settings(max_examples=60, deadline=None)
@given(label=_ODD_TEXT, value=_ODD_TEXT, trace=_ODD_TEXT)
def test_every_markdown_row_is_one_row_of_two_cells(label: str, value: str, trace: str) -> None:
    data = dict(_ENVIRONMENT, environment_variables={f"ANYACCEL_{label}": value})
    text = format_markdown(data, trace=f"trace {trace}")
    table, _, rest = text.partition("\n\n")[2].partition("\n\n")
    for line in table.splitlines():
        assert line.startswith("|") and line.endswith("|")
        assert len(re.findall(r"(?<!\\)(?:\\\\)*\|", line)) == 3, line
    fence = rest.splitlines()[0]
    assert set(fence) == {"`"} and rest.count(fence) == 2  # the trace cannot close it early


_ENVIRONMENT = environment_report(None)
