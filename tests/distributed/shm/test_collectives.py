"""The shared-memory collectives: checks in one process, and real ranks under faults."""

from __future__ import annotations

import signal
import textwrap
import time

import pytest
import torch.distributed as dist

from anyaccel.distributed import DistributedSetupError, init_distributed

from ..ranks import multiprocess, shm_entries, start_ranks


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
