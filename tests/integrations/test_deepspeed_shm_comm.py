"""DeepSpeed's ``initialize(world_size, rank)`` of the shared-memory module, without DeepSpeed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch.distributed as dist

from anyaccel.distributed import DistributedSetupError, init_distributed, shm_all_reduce_status
from anyaccel.integrations.deepspeed import register_shm_comm_ops, shm_comm_initialize
from tests.ports import free_port


@pytest.fixture
def one_rank(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    port = free_port()
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    init_distributed("gloo", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_initialize_needs_a_process_group() -> None:
    with pytest.raises(DistributedSetupError, match=r"needs torch\.distributed initialised"):
        shm_comm_initialize(2, 0)


def test_initialize_refuses_a_world_that_is_not_the_groups(one_rank: None) -> None:
    with pytest.raises(DistributedSetupError, match=r"initialize\(4, 1\) does not match .*size 1"):
        shm_comm_initialize(4, 1)


def test_initialize_on_one_rank_sets_nothing_up(one_rank: None) -> None:
    shm_comm_initialize(1, 0)
    assert shm_all_reduce_status() == "not set up yet"


def test_ops_are_registered_once_and_reduce_on_one_rank(one_rank: None) -> None:
    import torch

    register_shm_comm_ops()
    register_shm_comm_ops()  # a second call (or DeepSpeed's own module) changes nothing
    tensor = torch.arange(3.0)
    assert torch.ops.deepspeed.inference_all_reduce_(tensor) is tensor
    assert torch.ops.deepspeed.inference_all_reduce(tensor).tolist() == [0.0, 1.0, 2.0]
