"""``anyaccel report`` as a user runs it: a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "anyaccel", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
    )


def test_report_shows_trace_and_summary() -> None:
    result = run_cli("report")
    assert result.returncode == 0, result.stderr
    assert "accelerator: cpu" in result.stdout
    assert "cuda (torch CUDA/ROCm build)" in result.stdout
    assert "communication_backend  anyaccel_shm" in result.stdout
    assert "CpuFallbackWarning" not in result.stderr


def test_report_json_is_machine_readable() -> None:
    result = run_cli("report", "--json", "--all")
    data = json.loads(result.stdout)
    assert data["accelerator"]["name"] == "cpu"
    assert data["report"]["how"] == "detected"
    assert data["accelerator"]["supported_dtypes"][0] == "float32"
    assert {p["name"] for p in data["report"]["probes"]} >= {"cuda", "cpu"}


def test_report_honours_ds_accelerator() -> None:
    result = run_cli("report", env={"DS_ACCELERATOR": "cpu"})
    assert "chosen by: DS_ACCELERATOR=cpu" in result.stdout


def test_report_explains_a_bad_ds_accelerator_and_exits_1() -> None:
    result = run_cli("report", env={"DS_ACCELERATOR": "warp-drive"})
    assert result.returncode == 1
    assert "DS_ACCELERATOR='warp-drive' is not a known accelerator" in result.stderr
    assert "Traceback" not in result.stderr


def test_no_subcommand_prints_help_and_exits_2() -> None:
    result = run_cli()
    assert result.returncode == 2
    assert "report" in result.stderr


def test_console_script_is_installed() -> None:
    from importlib.metadata import entry_points

    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    if "anyaccel" not in scripts:
        pytest.skip("anyaccel is not installed as a distribution here")
    assert scripts["anyaccel"] == "anyaccel.cli:main"


def test_main_returns_status_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    from anyaccel.cli import main

    assert main(["report", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accelerator"]["name"] == "cpu"
