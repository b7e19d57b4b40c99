"""Shared-memory ``anyaccel.distributed.all_reduce`` against gloo, 2 ranks on this machine.

Both run in the same processes, interleaved round by round, on fp32 tensors from 4 KiB to
64 MiB; the table shows each median time and gloo's time divided by ours (higher is better).
Run: ``python benchmarks/allreduce.py [--ranks 2] [--rounds 15]`` (spawns the ranks itself),
or under ``torchrun --nproc-per-node 2 benchmarks/allreduce.py``.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def label(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def time_calls(call: object, tensor: torch.Tensor, calls: int) -> float:
    """Seconds per call over ``calls`` back-to-back collectives (after a barrier)."""
    dist.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        call(tensor)  # type: ignore[operator]
    return (time.perf_counter() - start) / calls


def run(rounds: int, dtype: torch.dtype) -> None:
    from anyaccel.distributed import all_reduce, init_distributed, shm_all_reduce_status

    info = init_distributed("gloo")
    rank = info.rank
    tensor = torch.ones(16, dtype=dtype)
    all_reduce(tensor)  # set up (and build the op on first use) before timing
    if rank == 0:
        print(
            f"ranks: {info.world_size}, dtype: {dtype}, path: {shm_all_reduce_status()}, "
            f"torch {torch.__version__}, {os.cpu_count()} CPUs"
        )
        print(f"{'size':>8} {'gloo us':>10} {'anyaccel us':>12} {'speed-up':>9}")
    element = torch.tensor([], dtype=dtype).element_size()
    for nbytes in SIZES:
        numel = nbytes // element
        tensor = torch.randn(numel).to(dtype)
        calls = max(2, min(200, (8 << 20) // nbytes))
        gloo: list[float] = []
        ours: list[float] = []
        for _ in range(rounds):  # interleaved, so load changes hit both alike
            gloo.append(time_calls(dist.all_reduce, tensor, calls))
            ours.append(time_calls(all_reduce, tensor, calls))
        # every rank reports the slower of the ranks: a collective ends when the last one does
        medians = torch.tensor(
            [statistics.median(gloo), statistics.median(ours)], dtype=torch.float64
        )
        dist.all_reduce(medians, op=dist.ReduceOp.MAX)
        if rank == 0:
            g, o = medians.tolist()
            print(
                f"{label(nbytes):>8} {g * 1e6:>10.1f} {o * 1e6:>12.1f} {g / o:>8.2f}x", flush=True
            )
    dist.destroy_process_group()


def spawned(rank: int, world_size: int, port: int, rounds: int, dtype: torch.dtype) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), DS_ACCELERATOR="cpu")  # fmt: skip
    torch.set_num_threads(1)
    run(rounds, dtype)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    warnings.simplefilter("ignore")
    if "RANK" in os.environ:  # under torchrun
        run(args.rounds, dtype)
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.spawn(spawned, args=(args.ranks, port, args.rounds, dtype), nprocs=args.ranks)


if __name__ == "__main__":
    sys.exit(main())
