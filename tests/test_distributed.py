"""Process-group set-up: launcher variables, backend checks, and real gloo across processes."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from anyaccel.distributed import DistributedSetupError, init_distributed, launch_info


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


def test_unavailable_backend_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    with pytest.raises(DistributedSetupError, match=r"'ccl'.*oneccl_bind_pt.*backend='gloo'"):
        init_distributed("ccl", rank=0, world_size=1)
    assert not dist.is_initialized()


def test_rank_needs_world_size() -> None:
    with pytest.raises(DistributedSetupError, match="together"):
        init_distributed(rank=0)


def test_all_reduce_needs_a_process_group() -> None:
    import torch

    from anyaccel.distributed import all_reduce

    with pytest.raises(
        DistributedSetupError, match=r"call anyaccel\.distributed\.init_distributed"
    ):
        all_reduce(torch.ones(2))


def test_all_reduce_takes_tensors_only() -> None:
    from anyaccel.distributed import all_reduce

    with pytest.raises(TypeError, match=r"torch\.Tensor, not list"):
        all_reduce([1.0, 2.0])  # type: ignore[arg-type]


def test_all_reduce_on_one_rank_leaves_the_tensor_and_sets_nothing_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    import torch

    from anyaccel.distributed import all_reduce, shm_all_reduce_status

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    init_distributed("gloo", rank=0, world_size=1)
    try:
        tensor = torch.arange(4.0)
        all_reduce(tensor)
        assert tensor.tolist() == [0.0, 1.0, 2.0, 3.0]
        assert shm_all_reduce_status() == "not set up yet"
    finally:
        dist.destroy_process_group()
