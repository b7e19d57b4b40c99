"""``anyaccel ops`` as a user runs it: the capability table, dry-run plans and builds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="session")
def extensions_dir(session_extensions_dir: Path) -> Path:
    """The session's op cache, the one ``tests/ops/conftest.py`` uses: one build per run."""
    return session_extensions_dir


def run_ops(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``anyaccel ops ARGS`` in a fresh interpreter running this checkout."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "CXX")}
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "anyaccel", "ops", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=300,
    )


def test_prints_the_capability_table() -> None:
    result = run_ops("--accelerator", "cpu")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["builder", "op", "buildable", "reason"]
    assert any(row.split()[:3] == ["CPUAdamBuilder", "cpu_adam", "yes"] for row in rows)
    assert "available on: cuda" in result.stdout


def test_plan_prints_flags_without_building(tmp_path: Path) -> None:
    result = run_ops(
        "--accelerator",
        "cuda",
        "--plan",
        "FusedAdamBuilder",
        env={"TORCH_CUDA_ARCH_LIST": "8.0", "TORCH_EXTENSIONS_DIR": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    assert "-gencode=arch=compute_80,code=sm_80" in result.stdout
    assert "cached: no" in result.stdout
    assert not any(tmp_path.iterdir())  # nothing was built or created


def test_build_loads_the_op(extensions_dir: Path) -> None:
    result = run_ops(
        "--accelerator",
        "cpu",
        "--build",
        "CPUAdamBuilder",
        env={"TORCH_EXTENSIONS_DIR": str(extensions_dir)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (line,) = result.stdout.splitlines()
    assert line.startswith(f"CPUAdamBuilder: loaded from {extensions_dir}/anyaccel_cpu_optim_")
    assert Path(line.rpartition(" ")[2]).is_file()


def test_unknown_builder_exits_2_and_lists_the_known_ones() -> None:
    result = run_ops("--accelerator", "cpu", "--plan", "NoSuchBuilder")
    assert result.returncode == 2
    assert "unknown op builder 'NoSuchBuilder'; known: " in result.stderr
    assert "CPUAdamBuilder" in result.stderr and "FusedAdamBuilder" in result.stderr


def test_an_unknown_accelerator_exits_2_naming_it_instead_of_a_host_table() -> None:
    result = run_ops("--accelerator", "bogus")
    assert result.returncode == 2
    assert "unknown accelerator 'bogus' for --accelerator; known: " in result.stderr
    assert "cpu, cuda" in result.stderr and result.stdout == ""


def test_an_op_unavailable_here_exits_1_saying_where_it_is() -> None:
    result = run_ops("--accelerator", "cpu", "--build", "FusedAdamBuilder")
    assert result.returncode == 1
    assert "error: op 'fused_adam' (FusedAdamBuilder) is not available on backend 'cpu'" in (
        result.stderr
    )
    assert "available on: cuda" in result.stderr


def test_defaults_to_the_detected_accelerator() -> None:
    result = run_ops(env={"DS_ACCELERATOR": "cpu"})
    assert result.returncode == 0, result.stderr
    assert "CPULionBuilder" in result.stdout
    assert "Traceback" not in result.stderr


def test_is_listed_in_the_command_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "anyaccel", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "ops " in result.stdout and "op builders" in result.stdout


def test_every_native_part_is_planned_by_name_under_any_accelerator() -> None:
    # the emulated device and the host collectives live in no accelerator's op package
    names = ("EmulatedDeviceBuilder", "HostViewBackendBuilder", "ShmC10dBackendBuilder")
    result = run_ops("--accelerator", "cuda", "--plan", *names)
    assert result.returncode == 0, result.stderr
    for op in ("emulated_device", "anyaccel_host_view_backend", "anyaccel_shm_c10d_backend"):
        assert f"op: {op} (" in result.stdout


def test_plan_all_names_every_builder_that_applies_and_why_one_does_not(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from anyaccel.cli import ops
    from anyaccel.emulated import state

    monkeypatch.setattr(state, "torch_release", lambda: (2, 4))  # too old for the emulated core
    args = argparse.Namespace(accelerator="cpu", plan=["all"], build=[])
    assert ops.run(args) == 0
    out, err = capsys.readouterr()
    planned = {line.split("(")[1].rstrip(")") for line in out.splitlines() if "op: " in line}
    assert {"CPUAdamBuilder", "HostViewBackendBuilder", "ShmC10dBackendBuilder"} <= planned
    assert "EmulatedDeviceBuilder" not in planned and "FusedAdamBuilder" not in planned
    assert "ShmBackendBuilder" not in planned  # an alias of ShmC10dBackendBuilder: listed once
    assert "EmulatedDeviceBuilder: not built, it does not apply here: the emulated device " in err
    assert "needs torch >= 2.13" in err


@pytest.mark.slow
def test_build_all_builds_every_native_part_by_name_for_a_ci_cache(extensions_dir: Path) -> None:
    result = run_ops(
        "--build", "all", env={"DS_ACCELERATOR": "cpu", "TORCH_EXTENSIONS_DIR": str(extensions_dir)}
    )
    assert result.returncode == 0, result.stderr[-3000:]
    built = {line.split(":")[0] for line in result.stdout.splitlines() if ": loaded from " in line}
    assert built >= {
        "CPUAdamBuilder",
        "EmulatedDeviceBuilder",
        "HostViewBackendBuilder",
        "ShmCommBuilder",
        "ShmC10dBackendBuilder",
    }
    again = run_ops(
        "--accelerator", "cpu", "--build", "EmulatedDeviceBuilder",
        env={"TORCH_EXTENSIONS_DIR": str(extensions_dir)},
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.startswith("EmulatedDeviceBuilder: loaded from ")
    assert "Building" not in again.stderr  # from the cache: nothing compiled again
