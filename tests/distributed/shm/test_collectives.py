"""The shared-memory collectives: checks in one process, and real ranks under faults."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest
import torch.distributed as dist

from anyaccel.distributed import DistributedSetupError, init_distributed
from tests.ports import free_port

from ..ranks import finish, kill_rank_one, multiprocess, start_ranks


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
    import torch

    from anyaccel.distributed import all_reduce, shm_all_reduce_status

    port = free_port()
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


# --- faults: a rank dies or stalls mid-collective ------------------------------------------
FAULT = textwrap.dedent(
    """
    import os, sys, time
    from datetime import timedelta
    import torch
    from anyaccel.distributed import init_distributed, all_reduce, CollectiveError
    info = init_distributed("gloo", timeout=timedelta(seconds=float(sys.argv[1])))
    all_reduce(torch.ones(8))  # sets the shared-memory group up
    print("ready", flush=True)
    if info.rank == 1:
        time.sleep(600)  # stalls; the test kills it or lets the others time out
    start = time.monotonic()
    try:
        all_reduce(torch.ones(1 << 20))
    except CollectiveError as error:
        print(f"{time.monotonic() - start:.2f} {error}", flush=True)
        os._exit(0)
    print("no error", flush=True)
    os._exit(3)
    """
)


def run_fault(timeout_s: float, kill_after: float | None) -> tuple[str, float]:
    out = kill_rank_one(FAULT, str(timeout_s), after=kill_after, timeout=timeout_s + 60)
    elapsed, _, message = out.strip().splitlines()[-1].partition(" ")
    return message, float(elapsed)


@multiprocess
def test_a_rank_killed_mid_collective_fails_the_others_fast_and_leaves_no_segment() -> None:
    message, elapsed = run_fault(timeout_s=60, kill_after=0.5)
    assert "rank 1 (pid" in message and "died" in message
    assert elapsed < 30  # well inside the group's 60 s timeout


@multiprocess
def test_a_stalled_rank_fails_the_others_at_the_group_timeout() -> None:
    message, elapsed = run_fault(timeout_s=3, kill_after=None)
    assert "timed out after 3.0 s" in message and "rank(s) 1" in message
    assert 2.5 < elapsed < 30


# --- threads, mismatched calls, views of parameters: one job, each case on a fresh group -----
CASES = textwrap.dedent(
    """
    import json, os, sys, threading
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.distributed import (CollectiveError, all_reduce, init_distributed,
                                      shm_all_reduce_status)
    info = init_distributed("gloo", timeout=timedelta(seconds=60))
    rank = info.rank

    def on_threads(count, work):
        results = [None] * count
        def run(index):
            try:
                results[index] = work(index)
            except Exception as error:
                results[index] = f"{type(error).__name__}: {error}"
        threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return results

    def first_call_from_two_threads():
        results, statuses = [], []
        for _ in range(3):  # three fresh groups: three chances for set-ups to race
            group = dist.new_group([0, 1])
            barrier = threading.Barrier(2)
            def work(index):
                tensor = torch.full((1000,), float(rank + 1))
                barrier.wait()
                all_reduce(tensor, group=group)
                return tensor.unique().tolist()
            results += on_threads(2, work)
            statuses.append(shm_all_reduce_status(group))
        return {"results": results, "statuses": statuses}

    def concurrent_calls():
        group = dist.new_group([0, 1])
        all_reduce(torch.ones(4), group=group)  # set up before the threads race
        barrier = threading.Barrier(2)
        def work(index):
            seen = []
            for _ in range(3):
                tensor = torch.full((3 << 20,), float(100 * index + rank + 1))  # 12 MB
                barrier.wait()
                all_reduce(tensor, group=group)
                seen.append(tensor.unique().tolist())
            return seen
        return {"results": on_threads(2, work), "status": shm_all_reduce_status(group)}

    def mismatched_sizes():
        group = dist.new_group([0, 1])
        all_reduce(torch.ones(4), group=group)
        tensor = torch.full(((1 << 20) * (rank + 1),), float(rank + 1))  # 4 MiB vs 8 MiB
        errors = []
        try:
            all_reduce(tensor, group=group)
        except CollectiveError as error:
            errors.append(str(error))
        untouched = tensor.unique().tolist() == [float(rank + 1)]
        after = torch.full((4,), float(rank + 1))
        try:
            all_reduce(after, group=group)
        except CollectiveError as error:
            errors.append(str(error))
        return {"errors": errors, "untouched": untouched, "after": after.tolist()}

    def view_of_parameter():
        group = dist.new_group([0, 1])
        ours = torch.nn.Parameter(torch.arange(12.0).reshape(3, 4) + rank)
        theirs = torch.nn.Parameter(torch.arange(12.0).reshape(3, 4) + rank)
        all_reduce(ours.t(), group=group)
        dist.all_reduce(theirs.t(), group=group)
        return {"equal": torch.equal(ours, theirs), "requires_grad": ours.requires_grad,
                "status": shm_all_reduce_status(group)}

    for case in sys.argv[1:]:
        if case == "first call":
            result = first_call_from_two_threads()
        elif case == "first call, disabled":
            os.environ["ANYACCEL_SHM_ALLREDUCE"] = "0"
            result = first_call_from_two_threads()
            del os.environ["ANYACCEL_SHM_ALLREDUCE"]
        elif case == "concurrent":
            result = concurrent_calls()
        elif case == "mismatch":
            result = mismatched_sizes()
        elif case == "view":
            result = view_of_parameter()
        print(json.dumps({"case": case, "rank": rank, **result}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    """
)
CASE_NAMES = ("first call", "first call, disabled", "concurrent", "mismatch", "view")


@pytest.fixture(scope="module")
def cases() -> dict[str, list[dict[str, Any]]]:
    """Every case's result on each rank (rank order), from one two-rank job."""
    outputs = finish(start_ranks(CASES, 2, *CASE_NAMES), timeout=180)
    results: dict[str, list[dict[str, Any]]] = {}
    for out in outputs:
        for line in out.splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                results.setdefault(record["case"], []).append(record)
    return {case: sorted(rows, key=lambda r: r["rank"]) for case, rows in results.items()}


@multiprocess
@pytest.mark.parametrize("case", ["first call", "first call, disabled"])
def test_first_call_from_two_threads_sets_the_group_up_once(
    cases: dict[str, list[dict[str, Any]]], case: str
) -> None:
    # Two set-ups raced each other's gloo all-gathers: SIGABRT inside gloo, or garbled data.
    expected = "shared memory" if case == "first call" else "disabled by ANYACCEL_SHM_ALLREDUCE"
    for row in cases[case]:
        assert row["results"] == [[3.0]] * 6, row
        assert row["statuses"] == [expected] * 3


@multiprocess
def test_concurrent_calls_on_one_group_each_get_a_whole_result(
    cases: dict[str, list[dict[str, Any]]],
) -> None:
    # Each 12 MB call takes three 4 MiB rounds; two threads' rounds used to interleave.
    # Calls pair up in the order each rank runs them (as with gloo), so a thread gets its peer
    # thread's tensor or the other one: a whole tensor (one value: 3, 103 or 203), never a mix.
    for row in cases["concurrent"]:
        assert row["status"] == "shared memory"
        for seen in row["results"]:
            assert isinstance(seen, list) and len(seen) == 3, row
            for values in seen:
                assert len(values) == 1 and values[0] in (3.0, 103.0, 203.0), row


@multiprocess
def test_sizes_that_agree_only_on_the_first_slot_fail_on_every_rank(
    cases: dict[str, list[dict[str, Any]]],
) -> None:
    # 1M float32 against 2M: the first 4 MiB chunk matched, the rest was summed into rank 0's
    # next call. Now the whole call is compared before anything is reduced.
    for row in cases["mismatch"]:
        first, after = row["errors"]
        assert "different tensors" in first, row
        assert "1048576 float32 elements" in first and "2097152 float32 elements" in first
        assert row["untouched"], "a refused call changed the tensor"
        assert "failed earlier" in after, row
        assert row["after"] == [float(row["rank"] + 1)] * 4


@multiprocess
def test_a_view_of_a_parameter_that_requires_grad_is_reduced_as_torch_does(
    cases: dict[str, list[dict[str, Any]]],
) -> None:
    for row in cases["view"]:
        assert row["status"] == "shared memory"
        assert row["equal"] is True and row["requires_grad"] is True, row


class _Communicator:
    """Stands in for the kernel's communicator: counts the calls that reach it."""

    def __init__(self) -> None:
        self.calls = 0

    def all_reduce(self, *args: object) -> None:
        self.calls += 1


class _State:
    def __init__(self, communicator: object) -> None:
        self.communicator = communicator


def _ready_entry(group: object, state: _State, communicator: _Communicator) -> Any:
    import weakref

    import torch

    from anyaccel.distributed.shm import collectives

    return collectives._Ready(
        weakref.ref(group), state, communicator, {torch.float32: 0}, 0, 30.0, 1
    )


def test_the_shortcut_takes_a_repeat_sum_and_leaves_a_closed_group_to_the_full_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from anyaccel.distributed.shm import collectives

    class Group:
        pass

    group, communicator = Group(), _Communicator()
    state = _State(communicator)
    entry = _ready_entry(group, state, communicator)
    monkeypatch.setattr(collectives, "_ready", {id(group): entry})
    tensor = torch.ones(4)
    assert collectives._fast_all_reduce(tensor, dist.ReduceOp.SUM, group)
    assert communicator.calls == 1
    # what the full path must take: another op, dtype, a strided view, another group
    assert not collectives._fast_all_reduce(tensor, dist.ReduceOp.MAX, group)
    assert not collectives._fast_all_reduce(tensor.double(), dist.ReduceOp.SUM, group)
    assert not collectives._fast_all_reduce(torch.ones(8)[::2], dist.ReduceOp.SUM, group)
    assert not collectives._fast_all_reduce(tensor, dist.ReduceOp.SUM, Group())
    # a group that was destroyed or failed drops its communicator: never the stale one
    state.communicator = None
    assert not collectives._fast_all_reduce(tensor, dist.ReduceOp.SUM, group)
    assert communicator.calls == 1


def test_a_forked_child_forgets_its_parents_shortcuts() -> None:
    import os

    from anyaccel.distributed.shm import collectives

    class Group:
        pass

    group, communicator = Group(), _Communicator()
    collectives._ready[-1] = _ready_entry(group, _State(communicator), communicator)
    try:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report whether the entry survived, then leave at once
            os.write(write, b"kept" if -1 in collectives._ready else b"gone")
            os._exit(0)
        os.close(write)
        answer = os.read(read, 16)
        os.waitpid(pid, 0)
        os.close(read)
    finally:
        collectives._ready.pop(-1, None)
    assert answer == b"gone"
