"""Registering ``anyaccel_shm`` with torch.distributed, and when a job uses it."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from anyaccel.distributed import BACKEND_NAME, backend_choice
from anyaccel.distributed.errors import DistributedSetupError
from anyaccel.distributed.process_group import cpu_collectives
from anyaccel.distributed.shm import registration
from anyaccel.distributed.shm.backend import (
    register_backend,
    shm_backend_wanted,
)
from anyaccel.errors import InvalidSettingError
from tests.ports import free_port


def test_the_backend_is_registered_for_cpu_on_import() -> None:
    assert registration.backend_registered()
    assert dist.is_backend_available(BACKEND_NAME)
    register_backend()  # idempotent
    assert list(dist.Backend.backend_list).count(BACKEND_NAME) == 1


def test_a_torch_without_register_backend_devices_gets_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def old_register(name: object, func: object, extended_api: bool = False) -> None: ...

    monkeypatch.setattr(registration, "backend_registered", lambda: False)
    monkeypatch.setattr(dist.Backend, "register_backend", old_register)
    with pytest.raises(DistributedSetupError, match=r"upgrade to torch >= 2\.4.*'gloo'"):
        register_backend()


def test_the_environment_and_the_argument_turn_it_on_and_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANYACCEL_SHM_BACKEND", raising=False)
    assert shm_backend_wanted() == (
        True,
        "the default for CPU ranks on one node; ANYACCEL_SHM_BACKEND=0 keeps gloo",
    )
    monkeypatch.setenv("ANYACCEL_SHM_BACKEND", "1")
    assert shm_backend_wanted() == (True, "ANYACCEL_SHM_BACKEND=1")
    monkeypatch.setenv("ANYACCEL_SHM_BACKEND", "FALSE")  # any case, as every on/off variable
    assert shm_backend_wanted() == (False, "ANYACCEL_SHM_BACKEND=FALSE")
    monkeypatch.setenv("ANYACCEL_SHM_BACKEND", "0")
    assert shm_backend_wanted() == (False, "ANYACCEL_SHM_BACKEND=0")
    assert shm_backend_wanted(True) == (True, "shm_backend=True")
    monkeypatch.setenv("ANYACCEL_SHM_BACKEND", "enable")  # not a silent gloo: an error
    with pytest.raises(InvalidSettingError, match="ANYACCEL_SHM_BACKEND='enable' is not an on/off"):
        shm_backend_wanted()
    with pytest.raises(InvalidSettingError, match="'enable'"):
        shm_backend_wanted(True)  # a bad value is refused even where the argument decides
    monkeypatch.delenv("ANYACCEL_SHM_BACKEND")
    assert shm_backend_wanted(False) == (False, "shm_backend=False")


def test_init_distributed_on_one_rank_picks_it_and_reports_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from anyaccel.distributed import init_distributed, shm_process_group

    port = free_port()
    for name, value in {
        "DS_ACCELERATOR": "cpu",
        "MASTER_ADDR": "127.0.0.1",
        "ANYACCEL_SHM_BACKEND": "1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MASTER_PORT", str(port))
    init_distributed(rank=0, world_size=1)
    try:
        assert backend_choice() == {
            "backend": BACKEND_NAME,
            "reason": "ANYACCEL_SHM_BACKEND=1",
        }
        assert dist.get_backend() == BACKEND_NAME
        assert cpu_collectives() == (
            "anyaccel_shm (ANYACCEL_SHM_BACKEND=1; chosen by init_distributed)"
        )
        world = dist.group.WORLD
        # no segment, nothing for the C++ Backend to run: the Python group itself
        assert shm_process_group(world) is world
        assert world.status == "a group of one rank needs no shared memory"
        tensor = torch.arange(4.0)
        dist.all_reduce(tensor)
        assert tensor.tolist() == [0.0, 1.0, 2.0, 3.0]
    finally:
        dist.destroy_process_group()
