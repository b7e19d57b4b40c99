"""The ``anyaccel_shm`` torch.distributed backend against gloo, 2 ranks on this machine.

Every collective runs through plain ``torch.distributed`` calls on two groups of the same
processes: the default group (backend ``anyaccel_shm``) and a gloo group over the same ranks,
interleaved round by round, on fp32 tensors of 1 MiB and 64 MiB (per rank's input). Before
timing, each collective's result on 2 ranks must equal gloo's bit for bit (the 64 MiB
correctness check the test suite leaves out). The table shows each median time and gloo's
time divided by ours (higher is better). For all_reduce at 4 MiB and more it also shows the
memory floor measured in the same run (every rank at once copies its input into a slot-sized
buffer and adds the ranks' buffers into it with torch, chunk by chunk: the least memory
traffic a shared-memory all_reduce needs) and our time over it (the issue asks for at most
2x). Last, a DDP training step of a small MLP on each group (the same model and data on
both), interleaved the same way.
Run: ``python benchmarks/collectives.py [--ranks 2] [--rounds 7] [--sizes 1,64] [--spec S]``
(spawns the ranks itself); ``--spec cpu:anyaccel_shm,cuda:gloo`` times the form anyaccel_shm
takes beside another device's backend (a C++ c10d Backend forwarding to the same group).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

Call = Callable[[Any], object]


def collectives(numel: int, size: int) -> dict[str, Callable[[], tuple[Call, list[torch.Tensor]]]]:
    """Each collective: a maker of ``call(group)`` on fresh fp32 buffers, and its outputs."""
    gen = torch.Generator().manual_seed(dist.get_rank())

    def fresh(count: int) -> torch.Tensor:
        return torch.randn(count, generator=gen)

    def all_reduce() -> tuple[Call, list[torch.Tensor]]:
        tensor = fresh(numel)
        return (lambda group: dist.all_reduce(tensor, group=group)), [tensor]

    def all_gather() -> tuple[Call, list[torch.Tensor]]:
        tensor, outputs = fresh(numel), [torch.empty(numel) for _ in range(size)]
        return (lambda group: dist.all_gather(outputs, tensor, group=group)), outputs

    def all_gather_into_tensor() -> tuple[Call, list[torch.Tensor]]:
        tensor, output = fresh(numel), torch.empty(numel * size)
        return (lambda group: dist.all_gather_into_tensor(output, tensor, group=group)), [output]

    def reduce_scatter_tensor() -> tuple[Call, list[torch.Tensor]]:
        tensor, output = fresh(numel), torch.empty(numel // size)
        return (lambda group: dist.reduce_scatter_tensor(output, tensor, group=group)), [output]

    def broadcast() -> tuple[Call, list[torch.Tensor]]:
        tensor = fresh(numel)
        return (lambda group: dist.broadcast(tensor, 0, group=group)), [tensor]

    return {
        "all_reduce": all_reduce,
        "all_gather": all_gather,
        "all_gather_into_tensor": all_gather_into_tensor,
        "reduce_scatter_tensor": reduce_scatter_tensor,
        "broadcast": broadcast,
    }


def time_calls(call: Call, group: Any, calls: int) -> float:
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(calls):
        call(group)
    return (time.perf_counter() - start) / calls


def memory_floor(numel: int, size: int, rounds: int, group: Any) -> float:
    """Median time for this host to copy ``numel`` fp32 into a buffer and add ``size`` of them.

    The least memory traffic a shared-memory all_reduce needs: its input copied into a slot,
    and the ranks' slots added into the output, chunk by chunk as the kernel does (one slot's
    worth at a time, so chunks stay in cache as they do for the kernel). Every rank runs it at
    the same moment (as a collective's ranks share memory bandwidth); the slowest rank counts.
    """
    from anyaccel.distributed.shm.group import slot_bytes

    chunk = slot_bytes(size) // 4
    tensor = torch.randn(numel)
    slots = [torch.randn(chunk) for _ in range(size)]

    def copy_and_add() -> None:
        for start in range(0, numel, chunk):
            part = tensor[start : start + chunk]
            count = part.numel()
            slots[0][:count].copy_(part)
            torch.add(slots[0][:count], slots[1][:count], out=part)
            for slot in slots[2:]:
                part.add_(slot[:count])

    copy_and_add()
    times = []
    for _ in range(rounds):
        dist.barrier(group=group)
        start = time.perf_counter()
        copy_and_add()
        times.append(time.perf_counter() - start)
    median = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(median, op=dist.ReduceOp.MAX, group=group)
    return float(median)


def ddp_steps(rounds: int, gloo: Any, ours: Any) -> tuple[float, float]:
    """Median time of one DDP step (forward, backward with the gradient all_reduce, SGD step)
    of the same 4-layer MLP (about 6.3 M parameters, 25 MiB of fp32 gradients) on each group."""
    torch.manual_seed(0)
    models = {}
    for name, group in (("gloo", gloo), ("ours", ours)):
        torch.manual_seed(0)
        layers = [torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1024),
                  torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                  torch.nn.Linear(1024, 1)]  # fmt: skip
        model = torch.nn.parallel.DistributedDataParallel(
            torch.nn.Sequential(*layers), process_group=group
        )
        models[name] = (model, torch.optim.SGD(model.parameters(), lr=1e-3))
    gen = torch.Generator().manual_seed(dist.get_rank())
    batch = torch.randn(32, 1024, generator=gen)

    def step(name: str) -> float:
        model, optimizer = models[name]
        dist.barrier(group=gloo)
        start = time.perf_counter()
        loss = model(batch).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return time.perf_counter() - start

    step("gloo"), step("ours")  # warm-up (DDP builds its buckets on the first steps)
    step("gloo"), step("ours")
    theirs_t, ours_t = [], []
    for _ in range(rounds):
        theirs_t.append(step("gloo"))
        ours_t.append(step("ours"))
    medians = torch.tensor([statistics.median(theirs_t), statistics.median(ours_t)],
                           dtype=torch.float64)  # fmt: skip
    dist.all_reduce(medians, op=dist.ReduceOp.MAX, group=gloo)
    g, o = medians.tolist()
    return g, o


def run(rounds: int, sizes_mib: list[int], spec: str | None) -> None:
    from anyaccel.distributed import backend_choice, init_distributed

    info = init_distributed(spec, shm_backend=True)
    rank, size = info.rank, info.world_size
    gloo = dist.new_group(backend="gloo")
    ours = dist.group.WORLD
    cpu_side = ours._get_backend(torch.device("cpu")) if spec else ours  # the C++ Backend's group
    status = getattr(getattr(cpu_side, "group", cpu_side), "status", "?")
    if rank == 0:
        print(f"ranks: {size}, fp32, default group: {dist.get_backend()} "
              f"({status}; {backend_choice()['reason']}), "
              f"torch {torch.__version__}, {os.cpu_count()} CPUs")  # fmt: skip
        print(f"{'collective':>24} {'size':>7} {'gloo ms':>9} {'shm ms':>9} {'speed-up':>9}")
    warnings.filterwarnings("ignore", category=FutureWarning)  # reduce_scatter_tensor's rename
    for mib in sizes_mib:
        numel = (mib << 20) // 4
        calls = max(2, min(50, (32 << 20) // (mib << 20)))
        for name, make in collectives(numel, size).items():
            call, outputs = make()
            inputs = [o.clone() for o in outputs]  # in-place collectives: restore before ours
            call(gloo)
            expected = [o.clone() for o in outputs]
            for output, saved in zip(outputs, inputs, strict=True):
                output.copy_(saved)
            call(ours)  # also the warm-up; with 2 ranks the results must be gloo's bit for bit
            same = all(torch.equal(o, e) for o, e in zip(outputs, expected, strict=True))
            if size == 2 and not same:
                raise SystemExit(f"{name} at {mib} MiB differs from gloo's result")
            theirs_t: list[float] = []
            ours_t: list[float] = []
            for _ in range(rounds):  # interleaved, so load changes hit both alike
                theirs_t.append(time_calls(call, gloo, calls))
                ours_t.append(time_calls(call, ours, calls))
            medians = torch.tensor(
                [statistics.median(theirs_t), statistics.median(ours_t)], dtype=torch.float64
            )
            dist.all_reduce(medians, op=dist.ReduceOp.MAX, group=gloo)  # the slower rank
            if rank == 0:
                g, o = medians.tolist()
                print(f"{name:>24} {mib:>4} MiB {g * 1e3:>9.3f} {o * 1e3:>9.3f} {g / o:>8.2f}x",
                      flush=True)  # fmt: skip
            if name == "all_reduce" and mib >= 4:
                floor = memory_floor(numel, size, rounds, gloo)
                if rank == 0:
                    print(f"{'memory floor (copy+add)':>24} {mib:>4} MiB {floor * 1e3:>9.3f} ms;"
                          f" shm / floor = {medians[1].item() / floor:.2f}x",
                          flush=True)  # fmt: skip
    g, o = ddp_steps(rounds, gloo, ours)
    if rank == 0:
        print(f"{'DDP step (6.3 M params)':>24} {'':>7} {g * 1e3:>9.3f} {o * 1e3:>9.3f} "
              f"{g / o:>8.2f}x", flush=True)  # fmt: skip
    dist.destroy_process_group()


def spawned(
    rank: int, world_size: int, port: int, rounds: int, sizes: list[int], spec: str | None
) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), DS_ACCELERATOR="cpu")  # fmt: skip
    torch.set_num_threads(1)
    run(rounds, sizes, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--sizes", default="1,64", help="MiB per rank, comma-separated")
    parser.add_argument(
        "--spec",
        default=None,
        help="the default group's backend spec, such as cpu:anyaccel_shm,cuda:gloo (the C++ "
        "Backend form anyaccel_shm takes beside other devices); default: anyaccel_shm alone",
    )
    args = parser.parse_args(argv)
    sizes = [int(part) for part in args.sizes.split(",")]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    mp.spawn(spawned, args=(args.ranks, port, args.rounds, sizes, args.spec), nprocs=args.ranks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
