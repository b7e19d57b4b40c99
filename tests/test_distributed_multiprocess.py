"""Real multi-process jobs on loopback: init_distributed, shared-memory all_reduce, core binding,
a rank dying mid-collective, a two-node job (one rank per node, as torchrun starts it), and the
DDP example. Every process runs under a timeout, so a hang fails a test instead of the run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs Linux"),
]

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 240


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "LOCAL_", "WORLD"))}
    env.update(DS_ACCELERATOR="cpu", PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return env


def start_ranks(
    script: str, world_size: int = 2, *args: str, nodes: int = 1
) -> list[subprocess.Popen[str]]:
    """``world_size`` processes of ``script`` with torchrun's variables on 127.0.0.1.

    With ``nodes`` > 1 the ranks are split evenly into that many nodes, as ``torchrun --nnodes``
    numbers them (``GROUP_RANK``, local ranks from 0 on each node).
    """
    port = free_port()
    per_node = world_size // nodes
    procs = []
    for rank in range(world_size):
        env = base_env()
        env.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank % per_node),
                   LOCAL_WORLD_SIZE=str(per_node), GROUP_RANK=str(rank // per_node),
                   GROUP_WORLD_SIZE=str(nodes), ROLE_RANK=str(rank),
                   ROLE_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))  # fmt: skip
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", script, *args],
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
    return procs


def finish(procs: list[subprocess.Popen[str]], timeout: float = TIMEOUT) -> list[str]:
    """Every process's stdout; fails (after killing them all) if one errs or runs too long.

    On a failure the message carries every process's exit status and stderr tail, so a hang in
    one process can be traced to the one that died first.
    """
    deadline = time.monotonic() + timeout
    outputs: dict[int, tuple[str, str]] = {}
    timed_out = False
    for index, proc in enumerate(procs):
        try:
            outputs[index] = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    if timed_out or any(proc.returncode != 0 for proc in procs):
        report = [f"timed out after {timeout} s" if timed_out else "a process failed"]
        for index, proc in enumerate(procs):
            if proc.poll() is None:
                proc.kill()
            out, err = outputs[index] if index in outputs else proc.communicate()
            report.append(f"--- process {index}: exit {proc.returncode}\n"
                          f"stdout: {out[-1000:]}\nstderr: {err[-3000:]}")  # fmt: skip
        pytest.fail("\n".join(report))
    return [outputs[index][0] for index in range(len(procs))]


def shm_entries() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


# --- one job: correctness against gloo, fallbacks, barrier, binding, DeepSpeed's op ----------
JOB = textwrap.dedent(
    """
    import json, os
    from datetime import timedelta
    import torch, torch.distributed as dist
    from anyaccel.distributed import init_distributed, all_reduce, shm_all_reduce_status
    info = init_distributed("gloo", bind_cores=True, timeout=timedelta(seconds=60))
    again = init_distributed()
    rank = info.rank
    checks = {}
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for numel in (3, 1_500_001):  # the large one spans several 4 MiB slots
            x = torch.randn(numel, generator=torch.Generator().manual_seed(rank)).to(dtype)
            y = x.clone()
            all_reduce(x)
            dist.all_reduce(y)
            checks[f"{dtype} x {numel} equals gloo"] = torch.equal(x, y)
    m = (torch.arange(12.0).reshape(3, 4) + rank).t()
    n = m.clone()
    all_reduce(m)
    dist.all_reduce(n)
    checks["non-contiguous equals gloo"] = torch.equal(m, n)
    x = torch.tensor([1.0, 5.0]) * (rank + 1)
    all_reduce(x, op=dist.ReduceOp.MAX)
    checks["max"] = x.tolist() == [2.0, 10.0]
    i = torch.tensor([rank + 1])
    all_reduce(i)
    checks["int64 falls back to gloo"] = i.item() == 3
    from anyaccel.ops.cpu.shm_comm import ShareMemCommBuilder
    module = ShareMemCommBuilder().load()
    module.initialize(info.world_size, rank)
    t = torch.full((5,), float(rank + 1))
    r = torch.ops.deepspeed.inference_all_reduce_(t)
    checks["deepspeed inference_all_reduce_"] = t.tolist() == [3.0] * 5 and r is t
    from anyaccel.distributed import ddp_comm_hook
    grads = []
    for hook in (None, ddp_comm_hook):
        torch.manual_seed(0)
        ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 3))
        if hook is not None:
            ddp.register_comm_hook(None, hook)
        ddp(torch.randn(8, 64, generator=torch.Generator().manual_seed(rank))).sum().backward()
        grads.append([p.grad.clone() for p in ddp.parameters()])
    checks["ddp_comm_hook equals DDP's gloo averaging"] = all(
        torch.equal(a, b) for a, b in zip(*grads))
    solo = dist.new_group([0])
    s = torch.full((4,), float(rank + 1))
    all_reduce(s, group=solo)  # rank 1 is not a member: untouched; rank 0 alone: untouched
    checks["group of one / non-member leaves the tensor"] = s.tolist() == [rank + 1.0] * 4
    dist.barrier()
    checks["second init_distributed"] = (again.rank, again.world_size) == (rank, 2)
    print(json.dumps({"rank": rank, "checks": checks, "status": shm_all_reduce_status(),
                      "affinity": sorted(os.sched_getaffinity(0)),
                      "threads": torch.get_num_threads()}))
    dist.destroy_process_group()
    """
)


@pytest.fixture(scope="module")
def job() -> list[dict[str, Any]]:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("core binding of 2 ranks needs 2 usable cores")
    outputs = finish(start_ranks(JOB))
    return sorted((json.loads(out.strip().splitlines()[-1]) for out in outputs),
                  key=lambda r: r["rank"])  # fmt: skip


def test_all_reduce_equals_gloo_for_every_dtype_and_size(job: list[dict[str, Any]]) -> None:
    for result in job:
        failed = [name for name, ok in result["checks"].items() if not ok]
        assert failed == [], f"rank {result['rank']}: {failed}"


def test_one_node_group_uses_shared_memory(job: list[dict[str, Any]]) -> None:
    assert [r["status"] for r in job] == ["shared memory", "shared memory"]


def test_bind_cores_gives_each_rank_its_own_cores(job: list[dict[str, Any]]) -> None:
    first, second = (set(r["affinity"]) for r in job)
    assert first and second and not first & second
    share = len(os.sched_getaffinity(0)) // 2
    assert [len(r["affinity"]) for r in job] == [share, share]
    assert [r["threads"] for r in job] == [share, share]


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
    before = shm_entries()
    procs = start_ranks(FAULT, 2, str(timeout_s))
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read()  # type: ignore[union-attr]
        if kill_after is not None:
            time.sleep(kill_after)
            procs[1].send_signal(signal.SIGKILL)
        out, err = procs[0].communicate(timeout=timeout_s + 60)
        assert procs[0].returncode == 0, out + err[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    assert shm_entries() - before == set(), "a shared-memory segment outlived the job"
    elapsed, _, message = out.strip().splitlines()[-1].partition(" ")
    return message, float(elapsed)


def test_a_rank_killed_mid_collective_fails_the_others_fast_and_leaves_no_segment() -> None:
    message, elapsed = run_fault(timeout_s=60, kill_after=0.5)
    assert "rank 1 (pid" in message and "died" in message
    assert elapsed < 30  # well inside the group's 60 s timeout


def test_a_stalled_rank_fails_the_others_at_the_group_timeout() -> None:
    message, elapsed = run_fault(timeout_s=3, kill_after=None)
    assert "timed out after 3.0 s" in message and "rank(s) 1" in message
    assert 2.5 < elapsed < 30


# --- a destroyed group dies: anyaccel keeps no reference to it ------------------------------
RELEASE = textwrap.dedent(
    """
    import gc, json, os, weakref
    import torch, torch.distributed as dist
    from anyaccel.distributed import init_distributed, all_reduce, shm_all_reduce_status
    def threads():
        return len(os.listdir("/proc/self/task"))
    before = threads()
    info = init_distributed("gloo")
    all_reduce(torch.ones(4))  # the shared-memory state of the default group
    # A dtype that goes to gloo, on a tensor kept alive: torch < 2.8 destroys a group with the
    # GIL held, and deadlocks if a worker is still dropping a temporary's Python tensor.
    kept = torch.ones(4, dtype=torch.float64)
    all_reduce(kept)
    status = shm_all_reduce_status()
    group = weakref.ref(dist.group.WORLD)
    dist.destroy_process_group()
    gc.collect()
    print(json.dumps({"status": status, "alive": group() is not None,
                      "threads": [before, threads()],
                      "after": shm_all_reduce_status()}))
    """
)


def test_destroying_the_group_stops_its_threads_as_without_anyaccel() -> None:
    # anyaccel once held every group it set up, so destroy_process_group() left gloo's worker
    # threads running to interpreter exit, where one still dropping a finished collective's
    # Python tensors needs the GIL and aborts the process ("terminate called ...", SIGABRT).
    for out in finish(start_ranks(RELEASE, 2)):
        result = json.loads(out.strip().splitlines()[-1])
        assert result["status"] == "shared memory"
        assert not result["alive"], "a destroyed process group is still alive"
        before, after = result["threads"]
        assert after == before, f"{after - before} threads outlived the destroyed group"
        assert result["after"] == "not set up yet"


# --- two nodes, as torchrun starts one rank on each ----------------------------------------
TWO_NODES = textwrap.dedent(
    """
    import json, torch
    from anyaccel.distributed import init_distributed, all_reduce, shm_all_reduce_status
    info = init_distributed("gloo")
    x = torch.full((1000,), float(info.rank + 1))
    all_reduce(x)
    print(json.dumps({"rank": info.rank, "sum": x.unique().tolist(),
                      "status": shm_all_reduce_status()}))
    torch.distributed.destroy_process_group()
    """
)


def test_two_node_job_falls_back_to_torch_distributed() -> None:
    # One rank per node, as `torchrun --nnodes 2 --nproc-per-node 1` starts them (two torchrun
    # agents on one host are themselves flaky: their exit barrier can stall for minutes).
    results = [
        json.loads(out.strip().splitlines()[-1])
        for out in finish(start_ranks(TWO_NODES, 2, nodes=2))
    ]
    for result in results:
        assert result["sum"] == [3.0]
        assert result["status"] == "the group's ranks run on more than one node"


# --- the DDP example -----------------------------------------------------------------------
def test_ddp_example_trains_under_torchrun() -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
               str(ROOT / "examples" / "ddp_train.py"), "--steps", "30"]  # fmt: skip
    proc = subprocess.Popen(command, env=base_env(), text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    losses = [float(line.split()[-1]) for line in out.splitlines() if line.startswith("step")]
    assert len(losses) >= 3 and losses[-1] < losses[0] / 4, out + err[-3000:]
    assert "done: 2 ranks on cpu (gloo), parameters in sync across ranks" in out, err[-3000:]
    assert out.rstrip().endswith("gradients via shared memory")
    assert proc.returncode == 0, err[-3000:]
