"""``exit_grace``: the pause at exit that lets torch's gloo workers finish before Python does."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from anyaccel.distributed import exit_grace
from anyaccel.distributed.errors import DistributedSetupError
from anyaccel.distributed.exit_grace import (
    DEFAULT_EXIT_GRACE_S,
    EXIT_GRACE_ENV,
    exit_grace_seconds,
    install_exit_grace,
)

SRC = str(Path(exit_grace.__file__).resolve().parents[2])


def test_unset_is_the_default_and_a_number_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EXIT_GRACE_ENV, raising=False)
    assert exit_grace_seconds() == DEFAULT_EXIT_GRACE_S > 0
    for value, seconds in (("0", 0.0), (" 0.5 ", 0.5), ("2", 2.0), ("", DEFAULT_EXIT_GRACE_S)):
        monkeypatch.setenv(EXIT_GRACE_ENV, value)
        assert exit_grace_seconds() == seconds


@pytest.mark.parametrize("value", ["-1", "soon", "nan", "inf", "61", "0.2s"])
def test_a_malformed_value_is_refused_naming_it_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(EXIT_GRACE_ENV, value)
    with pytest.raises(DistributedSetupError, match=EXIT_GRACE_ENV) as caught:
        exit_grace_seconds()
    assert repr(value) in str(caught.value) and "set it to 0" in str(caught.value)
    with pytest.raises(DistributedSetupError):
        install_exit_grace()  # at set-up, not at the job's end


def _run(code: str, env_extra: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "PYTHONPATH": SRC, "DS_ACCELERATOR": "cpu", **env_extra}
    began = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return result, time.monotonic() - began


EXIT_LOGGER = """
    import atexit, time
    atexit.register(lambda: print(f"exit at {time.monotonic():.3f}", flush=True))
"""


def _paused_for(result: subprocess.CompletedProcess[str]) -> float:
    """How long after the script's last line the interpreter went on (from the printed clocks)."""
    lines = dict(line.split(" at ") for line in result.stdout.splitlines() if " at " in line)
    return float(lines["exit"]) - float(lines["done"])


def test_ddp_device_ids_on_the_cpu_pauses_at_exit_once_and_0_turns_it_off() -> None:
    # atexit runs handlers last-registered first: the logger, registered before ours, runs
    # after our pause, so the clocks it prints bound the pause
    code = (
        EXIT_LOGGER
        + """
    import time
    from anyaccel.distributed import ddp_device_ids, ddp_output_device
    assert ddp_device_ids(0) is None and ddp_output_device(0) is None
    assert ddp_device_ids(1) is None  # a second call installs nothing more
    print(f"done at {time.monotonic():.3f}", flush=True)
    """
    )
    result, _ = _run(code, {EXIT_GRACE_ENV: "1.5"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert 1.4 <= _paused_for(result) < 2.9  # once, not once per call
    result, _ = _run(code, {EXIT_GRACE_ENV: "0"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert _paused_for(result) < 1.4


def test_init_distributed_on_gloo_installs_the_pause_and_a_late_bad_value_never_raises() -> None:
    code = (
        EXIT_LOGGER
        + """
    import os, time
    import torch.distributed as dist
    from anyaccel.distributed import init_distributed
    init_distributed(backend="gloo", rank=0, world_size=1)
    dist.destroy_process_group()
    os.environ["ANYACCEL_EXIT_GRACE"] = "garbage"  # changed after set-up: the default applies
    print(f"done at {time.monotonic():.3f}", flush=True)
    """
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    result, _ = _run(code, {EXIT_GRACE_ENV: "1.5", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
    assert result.returncode == 0, result.stderr[-2000:]
    assert DEFAULT_EXIT_GRACE_S * 0.9 <= _paused_for(result) < 1.4
    assert "Traceback" not in result.stderr
