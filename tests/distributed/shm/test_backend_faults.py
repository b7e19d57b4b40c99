"""The ``anyaccel_shm`` backend when ranks fail: killed, stalled, mixed paths, forks, churn, and
ranks on two nodes."""

from __future__ import annotations

import json
import textwrap

from ..ranks import finish, free_port, kill_rank_one, multiprocess, shm_entries, start_ranks

# --- faults: a rank killed mid-collective, and create/destroy cycles -------------------------
KILLED = textwrap.dedent(
    """
    import os, sys, time
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.distributed import CollectiveError, init_distributed
    info = init_distributed(backend="anyaccel_shm", timeout=timedelta(seconds=60))
    dist.all_reduce(torch.ones(8))
    print("ready", flush=True)
    if info.rank == 1:
        time.sleep(600)  # the test kills it
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1 << 20))
    except CollectiveError as error:
        print(f"{time.monotonic() - start:.2f} {error}", flush=True)
        os._exit(0)
    print("no error", flush=True)
    os._exit(3)
    """
)


@multiprocess
def test_a_rank_killed_mid_collective_fails_the_others_fast() -> None:
    out = kill_rank_one(KILLED, after=0.5, timeout=90)
    elapsed, _, message = out.strip().splitlines()[-1].partition(" ")
    assert "anyaccel_shm all_reduce failed" in message and "rank 1 (pid" in message
    assert "died" in message
    assert float(elapsed) < 30  # well inside the group's 60 s timeout


CYCLES = textwrap.dedent(
    """
    import gc, json, os, sys
    import torch, torch.distributed as dist
    import anyaccel.distributed
    from anyaccel.distributed import shm_process_group
    rank, size, cycles = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(sys.argv[1])
    base = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), size, rank == 0)

    def snapshot():
        maps = open("/proc/self/maps").read().count("anyaccel-shm")
        return [len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task")), maps]

    seen = []
    for cycle in range(cycles):
        dist.init_process_group("anyaccel_shm", store=dist.PrefixStore(f"{cycle}/", base),
                                rank=rank, world_size=size)
        tensor = torch.ones(10)
        dist.all_reduce(tensor)
        assert tensor[0] == size and shm_process_group().status == "shared memory"
        mapped = snapshot()[2]
        dist.destroy_process_group()
        gc.collect()
        seen.append(snapshot())
    print(json.dumps({"mapped": mapped, "first": seen[0], "last": seen[-1]}), flush=True)
    """
)


@multiprocess
def test_create_and_destroy_cycles_leak_no_mapping_fd_or_thread() -> None:
    before = shm_entries()
    outputs = finish(start_ranks(CYCLES, 2, "50"))
    assert shm_entries() - before == set()
    for out in outputs:
        result = json.loads(out.strip().splitlines()[-1])
        assert result["mapped"] == 1  # the live group's segment is mapped once...
        assert result["first"][2] == 0  # ...and unmapped by destroy_process_group()
        assert result["last"] == result["first"], result


# --- four ranks as two simulated nodes: gloo across nodes, shared memory within one ----------
TWO_NODES = textwrap.dedent(
    """
    import json, os, sys
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.distributed import backend_choice, init_distributed, shm_process_group
    info = init_distributed(timeout=timedelta(seconds=60), shm_backend=True)
    rank, size = info.rank, info.world_size
    choice = backend_choice()["backend"]
    # every rank's gloo mesh is connected before any rank tears it down: a rank still
    # connecting to one that already destroyed the group fails ("Connection closed by peer")
    dist.barrier()
    dist.destroy_process_group()
    # a second rendezvous on its own port: on the first one, a fast rank could reach rank 0's
    # old store, about to be destroyed, instead of its new one
    os.environ["MASTER_PORT"] = sys.argv[1]
    info = init_distributed(backend="anyaccel_shm", timeout=timedelta(seconds=60))
    gloo = dist.new_group(backend="gloo")
    node = dist.new_group([0, 1]), dist.new_group([2, 3])  # every rank creates both
    mine = node[rank // 2]
    failures = []
    for group, members in ((None, size), (mine, 2)):
        gen = torch.Generator().manual_seed(rank)
        for dtype in (torch.float32, torch.bfloat16):
            x = (torch.randn(1001, generator=gen) * 3).to(dtype)
            a, b = x.clone(), x.clone()
            dist.all_reduce(a, group=group)
            ref = [torch.empty_like(x) for _ in range(size)]
            dist.all_gather(ref, x, group=gloo)
            lo = 0 if group is None else rank // 2 * 2
            want = ref[lo].float()
            for part in ref[lo + 1: lo + members]:
                want = want + part.float()  # rank order, accumulated in fp32, rounded once
            if not torch.equal(a, want.to(dtype)) and group is not None:
                failures.append(f"all_reduce {dtype} on {members} ranks")
            # across nodes gloo adds in its own order and rounds each step: the dtype's tolerance
            atol = 1e-4 if dtype == torch.float32 else 0.25
            if group is None and not torch.allclose(a.float(), want, rtol=0, atol=atol):
                failures.append(f"all_reduce {dtype} on the world")
            out = [torch.empty_like(x) for _ in range(members)]
            dist.all_gather(out, x, group=group)
            if not all(torch.equal(o, r) for o, r in zip(out, ref[lo: lo + members])):
                failures.append(f"all_gather {dtype} on {members} ranks")
            dist.broadcast(b, lo + 1, group=group)
            if not torch.equal(b, ref[lo + 1]):
                failures.append(f"broadcast {dtype} on {members} ranks")
            big = torch.cat([x] * members)
            rs = torch.empty_like(x)
            dist.reduce_scatter_tensor(rs, big, group=group)
            whole = torch.empty_like(x)
            dist.all_reduce(whole.copy_(x), group=group)
            if not torch.allclose(rs.float(), whole.float(), rtol=0, atol=atol):
                failures.append(f"reduce_scatter_tensor {dtype} on {members} ranks")
            dist.reduce_scatter(rs, [x] * members, group=group)
            if not torch.allclose(rs.float(), whole.float(), rtol=0, atol=atol):
                failures.append(f"reduce_scatter {dtype} on {members} ranks")
            flat = torch.empty(members * x.numel(), dtype=dtype)
            dist.all_gather_into_tensor(flat, x, group=group)
            if not torch.equal(flat, torch.cat(ref[lo: lo + members])):
                failures.append(f"all_gather_into_tensor {dtype} on {members} ranks")
        dist.barrier(group=group)
    status = [shm_process_group().status, shm_process_group(mine).status]
    dist.destroy_process_group()
    print(json.dumps({"choice": choice, "status": status, "failures": failures}), flush=True)
    """
)


@multiprocess
def test_four_ranks_on_two_nodes_use_gloo_across_and_shared_memory_within() -> None:
    outputs = finish(start_ranks(TWO_NODES, 4, str(free_port()), nodes=2))
    for out in outputs:
        result = json.loads(out.strip().splitlines()[-1])
        assert result["choice"] == "gloo"  # asked for, but the job spans two nodes
        assert result["status"] == ["the group's ranks run on more than one node", "shared memory"]
        assert result["failures"] == []


# --- faults: a stalled rank, a mixed native/gloo call, a fork after use ----------------------
STALLED = textwrap.dedent(
    """
    import json, os, time
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.distributed import CollectiveError, init_distributed
    info = init_distributed(backend="anyaccel_shm", timeout=timedelta(seconds=3))
    dist.all_reduce(torch.ones(8))
    if info.rank == 1:
        time.sleep(6)  # stalled: alive, but late for the next collective
    start = time.monotonic()
    results = []
    for _ in range(2):
        tensor = torch.ones(1000)
        try:
            dist.all_reduce(tensor)
            results.append(tensor[:2].tolist())
        except CollectiveError as error:
            results.append(str(error))
        results.append(time.monotonic() - start)
    print(json.dumps(results), flush=True)
    os._exit(0)  # the group is unusable by design; skip destroying it
    """
)


@multiprocess
def test_a_stalled_rank_fails_every_other_rank_within_the_group_timeout() -> None:
    before = shm_entries()
    punctual, late = (json.loads(out.strip().splitlines()[-1])
                      for out in finish(start_ranks(STALLED, 2), timeout=60))  # fmt: skip
    assert shm_entries() - before == set()
    message, elapsed, again, _ = punctual
    assert "timed out after 3.0 s" in message and "rank(s) 1" in message, message
    assert "alive but did not enter" in message
    assert 2.5 < elapsed < 5.5  # the group's 3 s timeout, not a hang
    assert "failed earlier" in again
    # The late rank finds rank 0's contribution published before it gave up: the sum is whole
    # (never a partial one); its next collective fails at once, as the group is abandoned.
    summed, _, message, elapsed = late
    assert summed == [2.0, 2.0]
    assert "rank 0 of the shared-memory group gave up" in message, message
    assert elapsed < 2


MIXED = textwrap.dedent(
    """
    import json, os, time
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.distributed import CollectiveError, init_distributed
    info = init_distributed(backend="anyaccel_shm", timeout=timedelta(seconds=60))
    rank = info.rank
    results = []
    # the same collectives on gloo on both ranks: announced, then run (no error)
    tensor = torch.arange(6, dtype=torch.int32)
    dist.all_reduce(tensor)
    results.append(tensor.tolist())
    # different collectives on gloo: both fail at once
    start = time.monotonic()
    try:
        if rank == 0:
            dist.all_reduce(torch.ones(4, dtype=torch.int64))
        else:
            dist.reduce_scatter_tensor(torch.empty(2, dtype=torch.int64),
                                       torch.ones(4, dtype=torch.int64))
        results.append("no error")
    except CollectiveError as error:
        results.append(str(error))
    # one rank native (float32), the other on gloo (int32): both fail at once
    try:
        dist.all_reduce(torch.ones(4, dtype=torch.float32 if rank == 0 else torch.int32))
        results.append("no error")
    except CollectiveError as error:
        results.append(str(error))
    results.append(time.monotonic() - start)
    print(json.dumps(results), flush=True)
    os._exit(0)  # the group's shared-memory path is unusable by design
    """
)


@multiprocess
def test_one_rank_on_gloo_and_another_native_fail_at_once_not_at_the_timeout() -> None:
    outputs = [json.loads(out.strip().splitlines()[-1]) for out in finish(start_ranks(MIXED, 2))]
    for rank, (summed, different, mixed, elapsed) in enumerate(outputs):
        assert summed == [0, 2, 4, 6, 8, 10]  # announced on shared memory, then run on gloo
        assert "different collectives on gloo" in different, different
        assert "rank 0: all_reduce, rank 1: reduce_scatter" in different
        assert "failed" in mixed and "announced that it runs this collective on gloo" in mixed, (
            rank,
            mixed,
        )
        assert elapsed < 20  # the group's timeout is 60 s


FORKED = textwrap.dedent(
    """
    import json, os, sys
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.distributed import ShmProcessGroup, init_distributed, shm_process_group
    info = init_distributed(backend="anyaccel_shm", timeout=timedelta(seconds=60))
    rank, size = info.rank, info.world_size
    tensor = torch.ones(1000)
    dist.all_reduce(tensor)  # the group is in use (its segment mapped) before the fork
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child makes a fresh group with the other ranks' children
        os.close(read)
        store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), size, rank == 0,
                              timeout=timedelta(seconds=60))
        group = ShmProcessGroup(store, rank, size, timedelta(seconds=60))
        mine = torch.full((1000,), float(rank + 1))
        group.allreduce([mine]).wait()
        report = {"status": group.status, "sum": mine[:2].tolist()}
        os.write(write, json.dumps(report).encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(child, 0)
    with os.fdopen(read) as pipe:
        forked = json.loads(pipe.read() or "null")
    tensor = torch.ones(1000)
    dist.all_reduce(tensor)  # the parent's group still works after the fork
    parent = [shm_process_group().status, tensor[:2].tolist()]
    dist.destroy_process_group()
    print(json.dumps({"child_exit": status, "child": forked, "parent": parent}), flush=True)
    """
)


@multiprocess
def test_a_fork_after_use_leaves_the_parent_working_and_the_child_free_to_make_a_group() -> None:
    from ..ranks import free_port

    before = shm_entries()
    outputs = finish(start_ranks(FORKED, 2, str(free_port())))
    assert shm_entries() - before == set()
    for out in outputs:
        result = json.loads(out.strip().splitlines()[-1])
        assert result["child_exit"] == 0
        assert result["child"] == {"status": "shared memory", "sum": [3.0, 3.0]}
        assert result["parent"] == ["shared memory", [2.0, 2.0]]
