"""Joining the process group: backend checks, device sharing refused, re-entry, real processes."""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterator
from datetime import timedelta

import pytest
import torch.distributed as dist

from anyaccel.distributed import DistributedSetupError, LaunchInfo, init_distributed
from anyaccel.distributed import process_group as process_group_module
from tests.ports import free_port

from .test_devices import FakeAccelerator


def test_unavailable_backend_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    with pytest.raises(DistributedSetupError, match=r"'ccl'.*oneccl_bind_pt.*backend='gloo'"):
        init_distributed("ccl", rank=0, world_size=1)
    assert not dist.is_initialized()


def test_a_device_mapped_backend_is_checked_backend_by_backend() -> None:
    # torch's own is_backend_available("cpu:gloo,cuda:nccl") is False even where both exist.
    assert process_group_module._backend_available("cpu:gloo")
    assert process_group_module._backend_available("cpu:gloo, meta:gloo")
    assert not process_group_module._backend_available("cpu:gloo,cuda:nosuchbackend")
    assert not process_group_module._backend_available(",")


def test_a_missing_backend_in_a_device_map_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    with pytest.raises(DistributedSetupError, match=r"'nosuchbackend'.*backend='gloo'"):
        init_distributed("cpu:gloo,cuda:nosuchbackend", rank=0, world_size=1)
    assert not dist.is_initialized()


def test_anyaccel_shm_beside_another_backend_without_its_class_is_refused_not_half_applied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # beside another device's backend the group needs its compiled c10d Backend class
    from anyaccel.ops.cpu.shm_c10d_backend import ShmC10dBackendBuilder
    from anyaccel.ops.errors import BuildToolMissingError

    def no_compiler(self: object, verbose: bool = False) -> None:
        raise BuildToolMissingError("no C++ compiler (c++) on PATH")

    monkeypatch.setattr(ShmC10dBackendBuilder, "load", no_compiler)
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    with pytest.raises(DistributedSetupError, match=r"no C\+\+ compiler.*'cpu:gloo,cuda:nccl'"):
        init_distributed("cpu:anyaccel_shm,cuda:gloo", rank=0, world_size=1)
    assert not dist.is_initialized()


def test_rank_needs_world_size() -> None:
    with pytest.raises(DistributedSetupError, match="together"):
        init_distributed(rank=0)


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"backend": 5}, "backend=5"),
        ({"backend": " "}, "backend=' '"),
        ({"timeout": 5}, "timeout=5"),
        ({"timeout": timedelta(seconds=-1)}, "timeout=datetime.timedelta(days=-1"),
        ({"set_device": "no"}, "set_device='no'"),
        ({"bind_cores": "x"}, "bind_cores='x'"),
        ({"shm_backend": "yes"}, "shm_backend='yes'"),
    ],
)
def test_an_argument_of_the_wrong_kind_is_refused_by_name_and_nothing_changes(
    arguments: dict[str, object], named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    before = dict(os.environ)
    with pytest.raises(DistributedSetupError, match=re.escape(named)):
        init_distributed(rank=0, world_size=1, **arguments)  # type: ignore[arg-type]
    assert dict(os.environ) == before and not dist.is_initialized()


def test_device_sharing_is_refused_before_any_rendezvous(monkeypatch: pytest.MonkeyPatch) -> None:
    accelerator = FakeAccelerator("cuda", 2)
    monkeypatch.setattr(process_group_module, "get_accelerator", lambda: accelerator)

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


def test_cpu_collectives_says_which_backend_and_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from anyaccel.distributed.process_group import cpu_collectives

    monkeypatch.delenv("ANYACCEL_SHM_BACKEND", raising=False)
    assert not dist.is_initialized()  # no live choice: the default is reported
    assert cpu_collectives() == (
        "anyaccel_shm (the default for CPU ranks on one node; ANYACCEL_SHM_BACKEND=0 keeps gloo)"
    )
    monkeypatch.setenv("ANYACCEL_SHM_BACKEND", "1")
    assert cpu_collectives() == "anyaccel_shm (ANYACCEL_SHM_BACKEND=1)"
    monkeypatch.setenv("ANYACCEL_SHM_BACKEND", "off")
    assert cpu_collectives() == "gloo (ANYACCEL_SHM_BACKEND=off)"
    monkeypatch.setenv("ANYACCEL_SHM_BACKEND", "OFF")  # any case
    assert cpu_collectives() == "gloo (ANYACCEL_SHM_BACKEND=OFF)"
    monkeypatch.setenv("ANYACCEL_SHM_BACKEND", "enable")  # the report says so, never raises
    assert cpu_collectives().startswith(
        "none: init_distributed() will refuse the setting (ANYACCEL_SHM_BACKEND='enable' is not"
    )
