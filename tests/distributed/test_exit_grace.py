"""``exit_grace``: the pause at exit that lets torch's gloo workers finish before Python does."""

from __future__ import annotations

import os
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
    pause_for_backend,
)
from anyaccel.distributed.shm.backend import BACKEND_NAME
from anyaccel.settings import LAUNCHERS
from tests.ports import free_port

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
    # not a launched rank unless the test says so (an earlier test may leave launcher variables)
    launcher = {n for names in LAUNCHERS for n in (names.rank, names.world_size, names.local_rank)}
    env = {k: v for k, v in os.environ.items() if k not in launcher and not k.startswith("LOCAL_")}
    env.update(PYTHONPATH=SRC, DS_ACCELERATOR="cpu", **env_extra)
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
    port = str(free_port())
    result, _ = _run(code, {EXIT_GRACE_ENV: "1.5", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
    assert result.returncode == 0, result.stderr[-2000:]
    assert DEFAULT_EXIT_GRACE_S * 0.9 <= _paused_for(result) < 1.4
    assert "Traceback" not in result.stderr


def test_pause_for_backend_is_the_one_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(exit_grace, "install_exit_grace", lambda: calls.append("x") or True)
    for spec in ("gloo", "anyaccel_shm", "cpu:anyaccel_shm,cuda:nccl", "cuda:nccl,cpu:gloo"):
        assert pause_for_backend(spec) is True, spec
    for spec in ("nccl", "hccl", "ccl", "", "cuda:nccl"):
        assert pause_for_backend(spec) is False, spec
    assert calls == ["x"] * 4
    assert BACKEND_NAME in exit_grace.CPU_BACKENDS  # the literal there is the backend's name


def test_a_group_made_by_name_on_anyaccel_shm_pauses_at_exit_without_init_distributed() -> None:
    # what DeepSpeed, Lightning or a ported script does: init_process_group on the name the
    # accelerator gives; the backend's factory installs the pause, not init_distributed()
    code = (
        EXIT_LOGGER
        + """
    import time
    import torch.distributed as dist
    from anyaccel import get_accelerator
    name = get_accelerator().communication_backend_name()
    assert name == "anyaccel_shm", name
    dist.init_process_group(backend=name, rank=0, world_size=1)
    dist.destroy_process_group()
    print(f"done at {time.monotonic():.3f}", flush=True)
    """
    )
    port = str(free_port())
    env = {EXIT_GRACE_ENV: "1.5", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    result, _ = _run(code, env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert 1.4 <= _paused_for(result) < 2.9
    asked_only = code.replace("dist.init_process_group", "0 and dist.init_process_group")
    result, _ = _run(asked_only.replace("dist.destroy", "0 and dist.destroy"), env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert _paused_for(result) < 1.4  # asking alone installs nothing: no group, no pause


def test_a_launched_rank_that_asks_for_the_backend_pauses_at_exit_on_gloo_too() -> None:
    # what a ported script does with ANYACCEL_SHM_BACKEND=0: torch's own init_process_group on
    # "gloo", which no factory of ours sees; the rank that asked gets the pause (stop 50's CI
    # aborted at exit this way, 6 launches in 40 on torch 2.14 without it)
    code = (
        EXIT_LOGGER
        + """
    import time
    from anyaccel import get_accelerator
    assert get_accelerator().communication_backend_name() == "gloo"
    print(f"done at {time.monotonic():.3f}", flush=True)
    """
    )
    launched = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    env = {EXIT_GRACE_ENV: "1.5", "ANYACCEL_SHM_BACKEND": "0"}
    result, _ = _run(code, {**env, **launched})
    assert result.returncode == 0, result.stderr[-2000:]
    assert 1.4 <= _paused_for(result) < 2.9
    # a half-set launcher: asking still answers (init_process_group will name the gap), no pause
    result, _ = _run(code, {**env, "RANK": "0"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert _paused_for(result) < 1.4
