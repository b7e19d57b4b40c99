"""Launcher variables under faults: half-set launchers, bad ports, device sharing, re-entry."""

from __future__ import annotations

import re
import socket
import warnings
from collections import Counter
from collections.abc import Iterator

import pytest
import torch.distributed as dist
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anyaccel.distributed import launch as launch_module
from anyaccel.distributed.launch import (
    LAUNCHERS,
    DistributedSetupError,
    LaunchInfo,
    init_distributed,
    launch_info,
    select_device_index,
)


class FakeAccelerator:
    """Just the device-count side of an accelerator, with a chosen count."""

    def __init__(self, name: str, count: int, variable: str = "CUDA_VISIBLE_DEVICES") -> None:
        self._name = name
        self.count = count
        self.variable = variable
        self.selected: int | None = None

    def device_count(self) -> int:
        return self.count

    def visible_devices_envs(self) -> list[str]:
        return [self.variable]

    def communication_backend_name(self) -> str:
        return "gloo"

    def set_device(self, index: int) -> None:
        self.selected = index


def info(local_rank: int, local_world_size: int) -> LaunchInfo:
    return LaunchInfo(local_rank, local_world_size, local_rank, local_world_size,
                      "127.0.0.1", 29500, "torchrun")  # fmt: skip


# --- half-set launchers --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "0"}, "RANK is set but WORLD_SIZE is missing"),
        ({"WORLD_SIZE": "2"}, "WORLD_SIZE is set but RANK is missing"),
        ({"LOCAL_RANK": "0"}, "LOCAL_RANK is set but RANK and WORLD_SIZE are missing"),
        ({"OMPI_COMM_WORLD_RANK": "1"}, "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE"),
        ({"PMI_SIZE": "4"}, "PMI_SIZE is set but PMI_RANK is missing"),
        ({"SLURM_PROCID": "0"}, "SLURM_PROCID is set but SLURM_NTASKS is missing"),
    ],
)
def test_half_set_launcher_names_what_is_missing(env: dict[str, str], message: str) -> None:
    with pytest.raises(DistributedSetupError, match=message):
        launch_info(env)


def test_complete_launcher_wins_over_a_half_set_one() -> None:
    env = {"RANK": "0", "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1"}
    assert launch_info(env).launcher == "Slurm"


# --- ports ---------------------------------------------------------------------------------
@pytest.mark.parametrize("port", ["0", "65536", "70000", "-1", "+80", "8_0", "", " "])
def test_ports_outside_range_are_refused(port: str) -> None:
    with pytest.raises(DistributedSetupError, match=r"MASTER_PORT=.*1\.\.65535"):
        launch_info({"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": port})


@pytest.mark.parametrize("port", ["1", "65535", "29500"])
def test_ports_in_range_are_accepted(port: str) -> None:
    assert launch_info({"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": port}).master_port == int(
        port
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0 must be at least 1"),
        ({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "8"}, r"LOCAL_WORLD_SIZE=8 .*1\.\.4"),
        ({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"},
         r"LOCAL_RANK=2 is outside 0\.\.1"),
        ({"RANK": "-1", "WORLD_SIZE": "2"}, "RANK='-1' is not an integer"),
        ({"RANK": "\u0663", "WORLD_SIZE": "4"}, "is not an integer"),
        ({"RANK": "3(x2)", "WORLD_SIZE": "4"}, "is not an integer"),
    ],
)  # fmt: skip
def test_inconsistent_values_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(DistributedSetupError, match=message):
        launch_info(env)


# --- device selection ----------------------------------------------------------------------
def test_each_local_rank_gets_its_own_device_when_enough_are_visible() -> None:
    assert select_device_index(info(3, 4), FakeAccelerator("cuda", 4)) == 3  # type: ignore[arg-type]
    assert select_device_index(info(1, 2), FakeAccelerator("cuda", 8)) == 1  # type: ignore[arg-type]


def test_per_rank_visible_device_is_device_zero() -> None:
    assert select_device_index(info(3, 4), FakeAccelerator("npu", 1)) == 0  # type: ignore[arg-type]


def test_cpu_selects_no_device() -> None:
    assert select_device_index(info(1, 2), FakeAccelerator("cpu", 1)) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("count", [0, 2, 3])
def test_too_few_devices_is_an_error_naming_everything(
    count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1")
    accelerator = FakeAccelerator("npu", count, "ASCEND_RT_VISIBLE_DEVICES")
    with pytest.raises(DistributedSetupError) as raised:
        select_device_index(info(3, 4), accelerator)  # type: ignore[arg-type]
    message = str(raised.value)
    for part in ("LOCAL_RANK=3", "LOCAL_WORLD_SIZE=4", f"sees {count}",
                 "ASCEND_RT_VISIBLE_DEVICES='0,1'"):  # fmt: skip
        assert part in message


def test_device_sharing_is_refused_before_any_rendezvous(monkeypatch: pytest.MonkeyPatch) -> None:
    accelerator = FakeAccelerator("cuda", 2)
    monkeypatch.setattr(launch_module, "get_accelerator", lambda: accelerator)

    def no_rendezvous(*args: object, **kwargs: object) -> None:
        raise AssertionError("init_process_group must not be reached")

    monkeypatch.setattr(dist, "init_process_group", no_rendezvous)
    for name, value in {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "3",
                        "LOCAL_WORLD_SIZE": "4"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(DistributedSetupError, match="LOCAL_RANK=3 of LOCAL_WORLD_SIZE=4"):
        init_distributed()
    assert accelerator.selected is None


# --- a second call -------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def single_rank_group(monkeypatch: pytest.MonkeyPatch) -> Iterator[LaunchInfo]:
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    first = init_distributed("gloo", rank=0, world_size=1)
    try:
        yield first
    finally:
        dist.destroy_process_group()


def test_second_call_returns_the_live_group(single_rank_group: LaunchInfo) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = init_distributed()
    assert (again.rank, again.world_size) == (0, 1)


def test_second_call_warns_when_the_environment_disagrees(
    single_rank_group: LaunchInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    with pytest.warns(RuntimeWarning, match="rank 0 of 1.*says rank 5 of 8"):
        again = init_distributed()
    assert (again.rank, again.world_size, again.local_world_size) == (0, 1, 1)


def test_second_call_with_an_unreadable_environment_still_answers(
    single_rank_group: LaunchInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "nonsense")
    assert init_distributed().rank == 0


# --- random launcher environments ----------------------------------------------------------
ALL_VARIABLES = sorted(
    {name for names in LAUNCHERS for name in names[1:]}
    | {"LOCAL_SIZE", "MASTER_ADDR", "MASTER_PORT"}
)
VALUES = st.one_of(
    st.integers(min_value=0, max_value=9).map(str),
    st.integers(min_value=-3, max_value=70000).map(str),
    st.sampled_from(["", " 1", "2 ", "x", "+1", "1_0", "4(x2)", "3,4", "\u0662", "1e3", "0x1"]),
    st.text(max_size=6),
)
JUNK_ENVIRONMENTS = st.dictionaries(st.sampled_from(ALL_VARIABLES), VALUES, max_size=8)


@st.composite
def launcher_environments(draw: st.DrawFn) -> dict[str, str]:
    """A consistent environment of one launcher, then possibly one variable changed or dropped."""
    names = draw(st.sampled_from(LAUNCHERS))
    world_size = draw(st.integers(1, 16))
    local_world_size = draw(st.integers(1, world_size))
    env = {
        names.rank: str(draw(st.integers(0, world_size - 1))),
        names.world_size: str(world_size),
        names.local_rank: str(draw(st.integers(0, local_world_size - 1))),
        names.local_world_size: str(local_world_size),
        "MASTER_PORT": str(draw(st.integers(1, 65535))),
    }
    if draw(st.booleans()):
        env["MASTER_ADDR"] = "10.0.0.1"
    for name in draw(st.lists(st.sampled_from(sorted(env)), max_size=2, unique=True)):
        if draw(st.booleans()):
            del env[name]
        else:
            env[name] = draw(VALUES)
    return env


ENVIRONMENTS = st.one_of(launcher_environments(), JUNK_ENVIRONMENTS)
#: Outcome counts of the property test (printed with -s by the fault-suite script in the note).
OUTCOMES: Counter[str] = Counter()


def expected_launcher(env: dict[str, str]) -> str | None:
    """The launcher the documented priority picks, or None when none is complete."""
    return next((n.name for n in LAUNCHERS if n.rank in env and n.world_size in env), None)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ENVIRONMENTS)
def test_random_environments_give_a_consistent_result_or_a_clear_error(
    env: dict[str, str],
) -> None:
    try:
        result = launch_info(env)
    except DistributedSetupError as error:
        OUTCOMES["clear error"] += 1
        message = str(error)
        named = re.findall(r"[A-Z_]{4,}", message)
        assert any(name in ALL_VARIABLES for name in named), message
        return
    OUTCOMES["result"] += 1
    names = next(n for n in LAUNCHERS if n.name == result.launcher)
    assert result.launcher == expected_launcher(env)
    assert result.rank == int(env[names.rank])
    assert result.world_size == int(env[names.world_size])
    assert 0 <= result.rank < result.world_size
    assert 0 <= result.local_rank < result.local_world_size <= result.world_size
    assert 1 <= result.master_port <= 65535
    assert result.master_addr


FAULT_CASES = {
    "half-set torchrun": {"RANK": "1"},
    "port too large": {"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "70000"},
    "rank outside world": {"OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "4"},
    "garbage local size": {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "?"},
    "multi-node without address": {"PMI_RANK": "0", "PMI_SIZE": "4", "MPI_LOCALNRANKS": "2"},
}

FAULT_SCRIPT = """
import json, os, sys
from anyaccel.distributed import DistributedSetupError, init_distributed
cases = json.loads(sys.argv[1])
for label, env in cases.items():
    for name in [n for n in os.environ if n.startswith(("RANK", "WORLD", "LOCAL", "MASTER",
                 "OMPI_", "PMI_", "MPI_", "SLURM_"))]:
        del os.environ[name]
    os.environ.update(env)
    try:
        init_distributed(timeout=__import__("datetime").timedelta(seconds=5))
    except DistributedSetupError as error:
        print(label, "->", error)
    else:
        print(label, "-> NO ERROR")
"""


@pytest.mark.slow
def test_bad_environments_fail_fast_in_a_real_process() -> None:
    """init_distributed in a fresh interpreter: every bad environment is a clear error, no hang."""
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", FAULT_SCRIPT, json.dumps(FAULT_CASES)],
        capture_output=True, text=True, timeout=120,
        env={**__import__("os").environ, "DS_ACCELERATOR": "cpu"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(" -> ")[0] for line in lines] == list(FAULT_CASES)
    assert not any("NO ERROR" in line for line in lines), done.stdout
