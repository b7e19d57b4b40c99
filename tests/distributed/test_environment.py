"""The launcher's variables: every launcher, half-set ones, bad values, random environments."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anyaccel.distributed import DistributedSetupError, is_launched, launch_info
from anyaccel.distributed.environment import LAUNCHERS


def test_torchrun_variables() -> None:
    info = launch_info(
        {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
         "MASTER_ADDR": "node0", "MASTER_PORT": "1234"}
    )  # fmt: skip
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size) == (3, 8, 1, 4)
    assert (info.master_addr, info.master_port, info.launcher) == ("node0", 1234, "torchrun")


def test_open_mpi_variables_on_one_node_default_to_loopback() -> None:
    info = launch_info(
        {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
         "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    )  # fmt: skip
    assert info.launcher == "Open MPI"
    assert (info.rank, info.local_rank, info.master_addr, info.master_port) == (
        1, 1, "127.0.0.1", 29500
    )  # fmt: skip


def test_slurm_variables_with_repeated_task_counts() -> None:
    info = launch_info(
        {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
         "SLURM_NTASKS_PER_NODE": "4(x2)", "MASTER_ADDR": "n1"}
    )  # fmt: skip
    assert (info.rank, info.local_world_size, info.launcher) == (5, 4, "Slurm")


def test_intel_mpi_variables() -> None:
    info = launch_info({"PMI_RANK": "0", "PMI_SIZE": "1"})
    assert (info.launcher, info.local_rank, info.local_world_size) == ("Intel MPI/MPICH", 0, 1)


def test_no_launcher_says_what_to_set() -> None:
    with pytest.raises(DistributedSetupError, match="set RANK and WORLD_SIZE"):
        launch_info({})


def test_multi_node_without_master_addr_names_it() -> None:
    env = {"RANK": "0", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}
    with pytest.raises(DistributedSetupError, match="MASTER_ADDR is not set"):
        launch_info(env)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' is not an integer"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, r"RANK=2 is outside 0\.\.1"),
        ({"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "http"}, "MASTER_PORT='http'"),
    ],
)
def test_bad_values_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(DistributedSetupError, match=message):
        launch_info(env)


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


def test_is_launched_answers_was_i_launched() -> None:
    assert is_launched({}) is False
    assert is_launched({"PATH": "/usr/bin"}) is False
    assert is_launched({"RANK": "1", "WORLD_SIZE": "2"}) is True
    assert is_launched({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}) is True
    with pytest.raises(DistributedSetupError, match="WORLD_SIZE is missing"):
        is_launched({"RANK": "0"})  # half set: an error naming the gap, not a silent "no"
