"""The modules ``launch`` and ``allreduce`` were split by job; their old paths still import."""

from __future__ import annotations

import importlib

import pytest

import anyaccel.distributed as distributed


@pytest.mark.parametrize(
    "module", ["anyaccel.distributed.launch", "anyaccel.distributed.allreduce"]
)
def test_old_paths_re_export_the_same_objects(module: str) -> None:
    old = importlib.import_module(module)
    assert old.__all__
    for name in old.__all__:
        value = getattr(old, name)
        if hasattr(distributed, name):
            assert value is getattr(distributed, name), name


def test_old_paths_keep_what_users_imported_from_them() -> None:
    from anyaccel.distributed.allreduce import DTYPE_CODES, all_reduce, slot_bytes
    from anyaccel.distributed.launch import init_distributed, launch_info, select_device_index
    from anyaccel.distributed.process_group import init_distributed as moved
    from anyaccel.distributed.shm import all_reduce as shm_all_reduce

    assert (init_distributed, all_reduce) == (moved, shm_all_reduce)
    assert callable(launch_info) and callable(select_device_index) and callable(slot_bytes)
    assert set(DTYPE_CODES.values()) == {0, 1, 2}


def test_every_public_name_is_still_exported_from_the_package() -> None:
    for name in ("BACKEND_REMEDIES", "DEFAULT_MASTER_PORT", "LAUNCHERS", "CollectiveError",
                 "CoreBinding", "CoreBindingError", "DistributedSetupError", "LaunchInfo",
                 "Topology", "all_reduce", "assign_visible_devices", "bind_cores",
                 "current_binding", "ddp_comm_hook", "init_distributed", "launch_info",
                 "parse_core_list", "plan_core_binding", "shm_all_reduce_status"):  # fmt: skip
        assert name in distributed.__all__ and hasattr(distributed, name), name


def test_collective_error_is_a_run_time_error_not_a_set_up_error() -> None:
    from anyaccel.errors import AcceleratorError

    assert issubclass(distributed.CollectiveError, AcceleratorError)
    assert issubclass(distributed.CollectiveError, RuntimeError)
    assert not issubclass(distributed.CollectiveError, distributed.DistributedSetupError)
