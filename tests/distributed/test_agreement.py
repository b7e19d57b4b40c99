"""Ranks that chose different backends fail at once, on every rank, naming who has what."""

from __future__ import annotations

import json
import textwrap
import time

import pytest

from anyaccel.distributed.agreement import BackendChoice, _disagreement, rank_list

from .ranks import finish, multiprocess, start_ranks


def test_ranks_are_named_briefly_with_runs_as_ranges() -> None:
    assert rank_list([3]) == "rank 3"
    assert rank_list([0, 1, 2, 5, 7, 8]) == "ranks 0-2, 5, 7-8"


def test_a_differing_setting_is_named_with_each_ranks_value() -> None:
    shm = BackendChoice("anyaccel_shm", "ANYACCEL_SHM_BACKEND=1", "1")
    gloo = BackendChoice("gloo", "ANYACCEL_SHM_BACKEND=0", "0")
    message = _disagreement([shm, shm, shm, gloo])
    assert "ranks 0-2: anyaccel_shm (ANYACCEL_SHM_BACKEND=1), rank 3: gloo" in message
    assert "ANYACCEL_SHM_BACKEND differs between ranks (ranks 0-2: '1', rank 3: '0')" in message
    unset = BackendChoice("gloo", "shm_backend=False", None)
    same = _disagreement([BackendChoice("anyaccel_shm", "shm_backend=True", None), unset])
    assert "ANYACCEL_SHM_BACKEND differs" not in same
    assert "same backend= and shm_backend=" in same


# Each rank takes its ANYACCEL_SHM_BACKEND from argv (as a launcher that sets it per rank
# would), then joins with torch's default timeout (30 minutes).
DISAGREE = textwrap.dedent(
    """
    import json, os, sys, time
    rank = int(os.environ["RANK"])
    value = sys.argv[1].split(",")[rank]
    if value != "unset":
        os.environ["ANYACCEL_SHM_BACKEND"] = value
    import torch.distributed as dist
    from anyaccel.distributed import DistributedSetupError, backend_choice, init_distributed
    start = time.monotonic()
    try:
        init_distributed()
    except DistributedSetupError as error:
        print(json.dumps({"error": str(error), "seconds": time.monotonic() - start}), flush=True)
        os._exit(0)
    backend = dist.get_backend()
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps({"backend": backend, "choice": backend_choice()}), flush=True)
    os._exit(0)
    """
)


def _results(world_size: int, values: str) -> list[dict[str, object]]:
    outputs = finish(start_ranks(DISAGREE, world_size, values), timeout=180)
    return [json.loads(out.strip().splitlines()[-1]) for out in outputs]


@multiprocess
def test_ranks_that_disagree_on_the_shm_backend_fail_at_once_naming_each_ranks_value() -> None:
    start = time.monotonic()
    results = _results(2, "1,0")
    assert time.monotonic() - start < 150  # not the 30-minute group timeout
    for result in results:
        message = str(result["error"])
        assert "rank 0: anyaccel_shm (ANYACCEL_SHM_BACKEND=1), rank 1: gloo" in message, message
        assert "ANYACCEL_SHM_BACKEND differs between ranks (rank 0: '1', rank 1: '0')" in message
        assert float(str(result["seconds"])) < 60


@multiprocess
def test_four_ranks_with_one_unset_name_the_odd_one() -> None:
    for result in _results(4, "0,0,0,unset"):
        message = str(result["error"])
        assert "ANYACCEL_SHM_BACKEND differs between ranks (ranks 0-2: '0', rank 3: unset)" in (
            message
        ), message


@multiprocess
def test_ranks_whose_settings_differ_but_choose_the_same_backend_start() -> None:
    for result in _results(2, "unset,ON"):
        assert result["backend"] == "anyaccel_shm", result


# As DISAGREE, but a rank may refuse its own setting (InvalidSettingError) as well.
REFUSE = DISAGREE.replace(
    "from anyaccel.distributed import DistributedSetupError,",
    "from anyaccel.errors import InvalidSettingError\n"
    "from anyaccel.distributed import DistributedSetupError,",
).replace(
    'except DistributedSetupError as error:\n    print(json.dumps({"error": str(error),',
    "except (DistributedSetupError, InvalidSettingError) as error:\n"
    '    print(json.dumps({"kind": type(error).__name__, "error": str(error),',
)


@multiprocess
@pytest.mark.parametrize("values", ["unset,enabled", "enabled,unset"])
def test_a_rank_refusing_its_setting_fails_the_others_at_once_naming_it(values: str) -> None:
    assert REFUSE != DISAGREE
    start = time.monotonic()
    results = [
        json.loads(out.strip().splitlines()[-1])
        for out in finish(start_ranks(REFUSE, 2, values), timeout=180)
    ]
    assert time.monotonic() - start < 150  # not the 30-minute group timeout
    bad = values.split(",").index("enabled")
    for rank, result in enumerate(results):
        message = str(result["error"])
        assert "ANYACCEL_SHM_BACKEND='enabled' is not an on/off value" in message, message
        assert float(str(result["seconds"])) < 60
        if rank == bad:
            assert result["kind"] == "InvalidSettingError"
        else:
            assert result["kind"] == "DistributedSetupError"
            assert f"rank {bad}: 'enabled'" in message, message
