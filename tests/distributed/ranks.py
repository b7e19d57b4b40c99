"""Real ranks for multi-process tests: processes with torchrun's variables on 127.0.0.1.

Every process runs under a timeout, so a hang fails one test instead of the run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

import pytest

from tests.ports import free_port

Test = TypeVar("Test", bound=Callable[..., object])

TIMEOUT = 240


def multiprocess(test: Test) -> Test:
    """Mark a test that starts real ranks: slow, and Linux only (memfd segments, /proc)."""
    linux_only = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs Linux")
    return pytest.mark.slow(linux_only(test))


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "LOCAL_", "WORLD"))}
    # faulthandler: a rank that hangs prints every thread's stack when finish() aborts it
    env.update(DS_ACCELERATOR="cpu", PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1",
               PYTHONFAULTHANDLER="1")  # fmt: skip
    return env


def start_ranks(
    script: str,
    world_size: int = 2,
    *args: str,
    nodes: int = 1,
    env: Mapping[str, str] | None = None,
) -> list[subprocess.Popen[str]]:
    """``world_size`` processes of ``script`` with torchrun's variables on 127.0.0.1.

    With ``nodes`` > 1 the ranks are split evenly into that many nodes, as ``torchrun --nnodes``
    numbers them (``GROUP_RANK``, local ranks from 0 on each node). ``env``: more variables,
    the same for every rank.
    """
    port = free_port()
    per_node = world_size // nodes
    procs = []
    extra = dict(env or {})
    for rank in range(world_size):
        env = {**base_env(), **extra}
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
            out, err = outputs[index] if index in outputs else _stop(proc)
            report.append(f"--- process {index}: exit {proc.returncode}\n"
                          f"stdout: {out[-1000:]}\nstderr: {err[-6000:]}")  # fmt: skip
        pytest.fail("\n".join(report))
    return [outputs[index][0] for index in range(len(procs))]


def _stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """A hung process's output: SIGABRT first (its faulthandler prints each thread's stack to
    stderr), SIGKILL if that does not end it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGABRT)
        try:
            return proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.communicate()


#: /dev/shm names no test here makes but another job of the gate makes meanwhile: DeepSpeed's
#: own shared-memory all-reduce segments, which tests/benchmarks/test_collectives_bench.py times
#: in the pinned job while the oldest job runs tests/distributed (that test checks that they are
#: removed; anyaccel's segments are memfds and never appear in /dev/shm).
FOREIGN_SHM_PREFIXES = ("deepspeed_allreduce_buffer_",)


def shm_entries() -> set[str]:
    """The /dev/shm entries a test here could leave behind (other programs' aside)."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return set()
    return {name for name in names if not name.startswith(FOREIGN_SHM_PREFIXES)}


def kill_rank_one(script: str, *args: str, after: float | None, timeout: float) -> str:
    """Start 2 ranks of ``script`` (each prints ``ready`` first), SIGKILL rank 1 ``after``
    seconds later (``None``: never), and return rank 0's stdout; fails if rank 0 errs, runs
    past ``timeout`` or a shared-memory segment outlives the job."""
    before = shm_entries()
    procs = start_ranks(script, 2, *args)
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stderr is not None
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        if after is not None:
            time.sleep(after)
            procs[1].send_signal(signal.SIGKILL)
        out, err = procs[0].communicate(timeout=timeout)
        assert procs[0].returncode == 0, out + err[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    assert shm_entries() - before == set(), "a shared-memory segment outlived the job"
    return out
