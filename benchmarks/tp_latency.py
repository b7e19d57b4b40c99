"""all_reduce latency like for like with DeepSpeed's CPU all-reduce, 2 ranks on this host.

The two pairs a tensor-parallel job on CPU chooses between, in the same processes, every
contender interleaved round by round (so load changes hit all alike), fp32 and bf16, 1 KiB to
64 MiB per rank:

- the public calls: ``dist.all_reduce`` on a group of ``anyaccel_shm`` against DeepSpeed's
  ``deepspeed.comm.inference_all_reduce`` (on DeepSpeed's own CPU accelerator);
- the direct entries: ``anyaccel.distributed.all_reduce`` against DeepSpeed's raw op
  ``torch.ops.deepspeed.inference_all_reduce_`` (its ``ShareMemCommBuilder``).

Each result is first checked bit for bit against gloo's. The table gives each median (best)
time per call in microseconds, the slower rank's, and the ratios DeepSpeed/ours (above 1: ours
is faster). The load average is printed before and after (the machine may be shared).
Run with an interpreter that has DeepSpeed: ``PYTHONPATH=src $ANYACCEL_DEEPSPEED_PYTHON
benchmarks/tp_latency.py [--rounds 9] [--quick] [--load N]``; without DeepSpeed its columns
are "-". ``--quick``: 1 KiB, 16 KiB and 1 MiB, 3 rounds.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import torch
import torch.distributed as dist
from collectives import (  # benchmarks/ is on the path
    Call,
    cell,
    interleaved,
    label,
    load_deepspeed_op,
    ratio,
    remove_deepspeed_segment,
    spawn_under_load,
)

SIZES = tuple(1 << shift for shift in range(10, 27, 2))  # 1 KiB, 4 KiB, ... 64 MiB
QUICK_SIZES = (1 << 10, 16 << 10, 1 << 20)
HEADER = (
    "| dtype | size | dist.all_reduce us | ds.comm.inference_all_reduce us | DS/ours | "
    "anyaccel all_reduce us | ds op us | DS op/ours |"
)


def load_text() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


def contenders(tensor: torch.Tensor, ds_comm: Any, ds_ok: bool) -> dict[str, Call | None]:
    """all_reduce SUM of ``tensor`` in place by each contender (None: DeepSpeed absent)."""
    from anyaccel.distributed import all_reduce

    op = torch.ops.deepspeed.inference_all_reduce_ if ds_ok else None
    return {
        "dist": lambda _: dist.all_reduce(tensor),
        "ds_comm": (lambda _: ds_comm.inference_all_reduce(tensor)) if ds_ok else None,
        "direct": lambda _: all_reduce(tensor),
        "ds_op": (lambda _: op(tensor)) if op is not None else None,
    }


def table(sizes: tuple[int, ...], rounds: int, gloo: Any, ds_comm: Any, level: int) -> None:
    """The like-for-like table: each dtype and size, the four contenders interleaved."""
    rank = dist.get_rank()
    if rank == 0:
        print(HEADER)
        print("|---|---|---:|---:|---:|---:|---:|---:|", flush=True)
    for dtype, needed in ((torch.float32, 1), (torch.bfloat16, 2)):
        ds_ok = ds_comm is not None and level >= needed
        for nbytes in sizes:
            numel = nbytes // torch.tensor([], dtype=dtype).element_size()
            gen = torch.Generator().manual_seed(rank + nbytes)
            source = torch.randn(numel, generator=gen).to(dtype)
            tensor = source.clone()
            dist.all_reduce(tensor, group=gloo)
            expected = tensor.clone()
            calls = contenders(tensor, ds_comm, ds_ok)
            present = {name: call for name, call in calls.items() if call is not None}
            for name, call in present.items():  # each once from the same input: gloo's bits
                tensor.copy_(source)
                call(None)
                if not torch.equal(tensor, expected):
                    raise SystemExit(f"{name}: {dtype} {label(nbytes)} differs from gloo's")
            repeat = max(2, min(400, (8 << 20) // nbytes))
            tensor.zero_()  # timed on zeros, which stay zero: no sum overflows into inf or NaN
            timed = interleaved(present, rounds, gloo, repeat)
            if rank == 0:
                none = (None, None)
                d, c = timed["dist"], timed.get("ds_comm", none)
                a, o = timed["direct"], timed.get("ds_op", none)
                print(
                    f"| {str(dtype).replace('torch.', '')} | {label(nbytes)} | {cell(*d)} | "
                    f"{cell(*c)} | {ratio(c[0], d[0])} | {cell(*a)} | {cell(*o)} | "
                    f"{ratio(o[0], a[0])} |",
                    flush=True,
                )


def deepspeed_comm() -> tuple[Any, int, str]:
    """DeepSpeed's ``deepspeed.comm`` set up on the existing group as a DeepSpeed job sets it up
    (its ``TorchBackend`` builds and initialises its own shared-memory op), its op's
    ``vector_kernel_level``, and why not where DeepSpeed is absent."""
    try:
        import deepspeed.comm as ds_comm
    except Exception as exc:  # absent, or an install that does not import here
        return None, 0, f"DeepSpeed is not importable here ({type(exc).__name__}: {exc})"
    ds_comm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    backend = ds_comm.comm.cdb
    if getattr(backend, "shm_comm_op", None) is None:
        return None, 0, "DeepSpeed's TorchBackend has no shared-memory op here"
    level = int(backend.shm_vector_kernel_level)
    return ds_comm, level, f"DeepSpeed ShareMemCommBuilder, vector_kernel_level {level}"


def run(args: argparse.Namespace) -> None:
    from anyaccel.distributed import init_distributed

    _, why = load_deepspeed_op()  # before the group, as DeepSpeed's TorchBackend builds it
    info = init_distributed(shm_backend=True)
    ds_comm, level, why = deepspeed_comm() if not why else (None, 0, why)
    gloo = dist.new_group(backend="gloo")
    form = type(dist.group.WORLD._get_backend(torch.device("cpu"))).__name__
    if info.rank == 0:
        print(
            f"## all_reduce SUM like for like, {info.world_size} ranks: median (best) us per "
            f"call, the slower rank's; ours: {dist.get_backend()} ({form}); {why}; torch "
            f"{torch.__version__}; {args.load} busy processes; {load_text()}",
            flush=True,
        )
    try:
        table(QUICK_SIZES if args.quick else SIZES, args.rounds, gloo, ds_comm, level)
    finally:
        if ds_comm is not None:
            dist.barrier(group=gloo)
            remove_deepspeed_segment(info.rank)
    if info.rank == 0:
        print(f"after: {load_text()}", flush=True)
    dist.destroy_process_group()


def spawned(rank: int, world_size: int, port: int, args: argparse.Namespace) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), DS_ACCELERATOR="cpu",
                      LOCAL_SIZE=str(world_size))  # fmt: skip  # DeepSpeed's launcher sets it
    torch.set_num_threads(1)
    run(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--load", type=int, default=0, help="busy processes to run meanwhile")
    parser.add_argument("--quick", action="store_true", help="1 KiB, 16 KiB, 1 MiB; 3 rounds")
    args = parser.parse_args(argv)
    if args.load < 0 or args.ranks < 2 or args.rounds < 1:
        parser.error(f"--load >= 0, --ranks >= 2 and --rounds >= 1 expected: {vars(args)}")
    if args.quick:
        args.rounds = min(args.rounds, 3)
    spawn_under_load(spawned, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
