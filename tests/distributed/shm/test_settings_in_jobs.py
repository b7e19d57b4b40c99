"""The shared-memory switches in real jobs: any case, unknown values refused on every rank at
once, and a kernel that cannot be built said once per job at the default log level."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from ..ranks import finish, multiprocess, start_ranks

# argv[1]: "NAME=value;NAME=value" per rank, ranks separated by "|" (a rank past the list takes
# the last), set as a launcher that sets them per rank would.
JOB = textwrap.dedent(
    """
    import io, json, os, sys, time
    rank = int(os.environ["RANK"])
    settings = sys.argv[1].split("|")
    for pair in filter(None, settings[min(rank, len(settings) - 1)].split(";")):
        name, _, value = pair.partition("=")
        os.environ[name] = value
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.distributed import all_reduce, backend_choice, init_distributed
    from anyaccel.distributed.shm import shm_all_reduce_status, shm_process_group
    from anyaccel.errors import InvalidSettingError
    logged, stderr = io.StringIO(), sys.stderr
    sys.stderr = logged  # what the default logging (no configuration) writes
    start = time.monotonic()
    try:
        init_distributed(timeout=timedelta(seconds=120))
        gloo = dist.new_group(backend="gloo")
        second = dist.new_group(backend="anyaccel_shm")
        t = torch.arange(4.0); dist.all_reduce(t)
        u = torch.arange(4.0); all_reduce(u, group=gloo); all_reduce(u, group=second)
    except InvalidSettingError as error:
        sys.stderr = stderr
        print(json.dumps({"error": str(error), "seconds": time.monotonic() - start}), flush=True)
        os._exit(0)
    sys.stderr = stderr
    result = {"backend": dist.get_backend(), "choice": backend_choice()["reason"],
              "status": [getattr(shm_process_group(), "status", None),
                         shm_all_reduce_status(gloo), shm_process_group(second).status],
              "sums": [t.tolist(), u.tolist()], "logged": logged.getvalue()}
    dist.destroy_process_group()
    print(json.dumps(result), flush=True)
    os._exit(0)
    """
)


def run_job(settings: str, world_size: int = 2, **env: str) -> list[dict[str, Any]]:
    outputs = finish(start_ranks(JOB, world_size, settings, env=env), timeout=240)
    return [json.loads(out.strip().splitlines()[-1]) for out in outputs]


@multiprocess
def test_off_in_capitals_turns_either_switch_off() -> None:
    for rank, result in enumerate(run_job("ANYACCEL_SHM_ALLREDUCE=FALSE")):
        assert result["backend"] == "anyaccel_shm"
        disabled = "disabled by ANYACCEL_SHM_ALLREDUCE"
        assert result["status"] == [disabled, disabled, disabled], (rank, result)
        assert result["sums"] == [[0.0, 2.0, 4.0, 6.0], [0.0, 4.0, 8.0, 12.0]]
        assert result["logged"] == ""  # a choice, not a failure: nothing at WARNING
    for result in run_job("ANYACCEL_SHM_BACKEND=Off"):
        assert (result["backend"], result["choice"]) == ("gloo", "ANYACCEL_SHM_BACKEND=Off")


@multiprocess
def test_an_unknown_shm_backend_value_is_an_error_naming_it_not_a_silent_gloo() -> None:
    for result in run_job("ANYACCEL_SHM_BACKEND=enable"):
        assert "ANYACCEL_SHM_BACKEND='enable' is not an on/off value" in result["error"]
        assert "1/true/yes/on (on) or 0/false/no/off (off)" in result["error"]


@multiprocess
def test_an_unknown_allreduce_value_on_one_rank_fails_every_rank_at_once() -> None:
    for result in run_job("|ANYACCEL_SHM_ALLREDUCE=maybe"):  # rank 1 only
        assert result["error"].startswith("rank 1: ANYACCEL_SHM_ALLREDUCE='maybe' is not an")
        assert result["seconds"] < 60  # the group's timeout is 120 s


@multiprocess
def test_a_kernel_that_cannot_be_built_is_said_once_per_job_at_warning(tmp_path: Path) -> None:
    env = {"CXX": "/nonexistent/g++", "TORCH_EXTENSIONS_DIR": str(tmp_path / "cache")}
    results = run_job("", 2, **env)
    for rank, result in enumerate(results):
        assert result["backend"] == "anyaccel_shm"
        assert all("the shared-memory op is unavailable" in s for s in result["status"])
        assert result["sums"] == [[0.0, 2.0, 4.0, 6.0], [0.0, 4.0, 8.0, 12.0]]
        warnings = result["logged"].count("without shared memory, which is slower")
        assert warnings == (1 if rank == 0 else 0), (rank, result["logged"])
    assert "anyaccel_shm runs every collective on gloo" in results[0]["logged"]
    assert "/nonexistent/g++" in results[0]["logged"]
    # chosen rather than failed: nothing at WARNING
    for result in run_job("ANYACCEL_SHM_ALLREDUCE=0", 2, **env):
        assert result["logged"] == ""


# A group made by torch's own init_process_group: argv[1] is rank 1's ANYACCEL_SHM_BACKEND.
PLAIN_JOB = textwrap.dedent(
    """
    import json, os, sys
    if os.environ["RANK"] == "1":
        os.environ["ANYACCEL_SHM_BACKEND"] = sys.argv[1]
    from datetime import timedelta
    import torch.distributed as dist
    import anyaccel.distributed  # registers anyaccel_shm
    from anyaccel.errors import InvalidSettingError
    try:
        dist.init_process_group(backend="anyaccel_shm", timeout=timedelta(seconds=120))
    except InvalidSettingError as error:
        print(json.dumps({"error": str(error)}), flush=True)
        os._exit(0)
    print(json.dumps({"backend": dist.get_backend()}), flush=True)
    os._exit(0)
    """
)


@multiprocess
def test_an_unknown_shm_backend_value_under_init_process_group_fails_every_rank() -> None:
    outputs = finish(start_ranks(PLAIN_JOB, 2, "maybe"), timeout=240)
    for out in outputs:
        result = json.loads(out.strip().splitlines()[-1])
        assert result["error"].startswith("rank 1: ANYACCEL_SHM_BACKEND='maybe' is not an"), result
