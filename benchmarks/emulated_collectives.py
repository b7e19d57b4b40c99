"""The emulated accelerator's collectives (``emuccl``) against gloo and anyaccel_shm, 2 ranks.

Each rank installs the emulated device and makes three groups over the same ranks: the default
group (``cpu:gloo,emu:emuccl``: the emulated device's backend for ``emu`` tensors), a gloo group
and an ``anyaccel_shm`` group for CPU tensors. Timed, interleaved round by round: an fp32
all_reduce of 1 MiB and 25 MiB (the size of the model's gradients), ``emu`` tensors on the
emulated backend and CPU tensors on the others; then a DDP step (forward, backward with the
gradient all_reduce, SGD) of the same 4-layer MLP (6.3 M parameters) on ``emu:<rank>`` with
``device_ids=[rank]`` and on the CPU with each CPU group. The DDP losses must equal gloo's bit
for bit before anything is timed. The table shows median times (the slower rank's) and each
CPU group's time over the emulated one (above 1: the emulated path is faster). A DDP step on
the emulated device also pays for the device itself (every op dispatched through it), which
the all_reduce rows leave out.
Run: ``python benchmarks/emulated_collectives.py [--rounds 7] [--device-type emu] [--quick]``.
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


def median_of_slowest(times: list[float], group: Any) -> float:
    """The median of ``times``, the slower rank's."""
    value = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=group)
    return float(value)


def interleaved(
    calls: dict[str, Callable[[], object]], rounds: int, repeat: int, group: Any
) -> dict[str, float]:
    """Median seconds per call of each entry, timed in turn round by round (the slower rank)."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            dist.barrier(group=group)
            start = time.perf_counter()
            for _ in range(repeat):
                call()
            times[name].append((time.perf_counter() - start) / repeat)
    return {name: median_of_slowest(values, group) for name, values in times.items()}


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1024),
        torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1),
    )  # fmt: skip


def run(rounds: int, device_type: str, quick: bool) -> None:
    from anyaccel.distributed import BACKEND_NAME as SHM_BACKEND
    from anyaccel.testing.emulated import install

    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    accelerator = install(device_type, size)
    name = accelerator.communication_backend_name()
    device = torch.device(device_type, rank)
    dist.init_process_group(f"cpu:gloo,{device_type}:{name}")
    emulated = dist.group.WORLD
    gloo = dist.new_group(backend="gloo")
    shm = dist.new_group(backend=SHM_BACKEND)
    groups = {"gloo": gloo, "anyaccel_shm": shm}
    if rank == 0:
        print(f"ranks: {size}, fp32, emulated {device_type!r} ({name}) vs CPU groups, "
              f"torch {torch.__version__}, {os.cpu_count()} CPUs")  # fmt: skip
        print(f"{'what':>26} {'gloo ms':>9} {'shm ms':>9} {'emulated ms':>12} "
              f"{'gloo/emu':>9} {'shm/emu':>9}")  # fmt: skip

    def report(what: str, medians: dict[str, float]) -> None:
        if rank == 0:
            g, s, e = medians["gloo"], medians["anyaccel_shm"], medians["emulated"]
            print(f"{what:>26} {g * 1e3:>9.3f} {s * 1e3:>9.3f} {e * 1e3:>12.3f} "
                  f"{g / e:>8.2f}x {s / e:>8.2f}x", flush=True)  # fmt: skip

    for mib in (1,) if quick else (1, 25):
        host = torch.randn((mib << 20) // 4, generator=torch.Generator().manual_seed(rank))
        on_device = host.to(device)
        calls: dict[str, Callable[[], object]] = {
            cpu_name: (lambda group=group, tensor=host: dist.all_reduce(tensor, group=group))
            for cpu_name, group in groups.items()
        }
        calls["emulated"] = lambda tensor=on_device: dist.all_reduce(tensor, group=emulated)
        for call in calls.values():
            call()  # warm-up (first use sets the shared-memory segment up)
        report(f"all_reduce {mib} MiB", interleaved(calls, rounds, max(2, 32 // mib), gloo))

    batch = torch.randn(32, 1024, generator=torch.Generator().manual_seed(rank))
    ddp = torch.nn.parallel.DistributedDataParallel
    models = {cpu_name: ddp(mlp(), process_group=group) for cpu_name, group in groups.items()}
    models["emulated"] = ddp(mlp().to(device), device_ids=[rank], process_group=emulated)
    optimizers = {
        key: torch.optim.SGD(model.parameters(), lr=1e-3) for key, model in models.items()
    }
    inputs = {key: batch.to(device) if key == "emulated" else batch for key in models}
    losses: dict[str, list[float]] = {key: [] for key in models}

    def step(key: str) -> None:
        loss = models[key](inputs[key]).square().mean()
        optimizers[key].zero_grad()
        loss.backward()
        optimizers[key].step()
        losses[key].append(loss.item())

    for _ in range(2):  # warm-up: DDP builds its buckets on the first steps
        for key in models:
            step(key)
    if losses["emulated"] != losses["gloo"]:
        raise SystemExit(f"DDP losses differ: emulated {losses['emulated']}, gloo {losses['gloo']}")
    steps = {key: (lambda key=key: step(key)) for key in models}
    report("DDP step (6.3 M params)", interleaved(steps, rounds, 1, gloo))
    dist.destroy_process_group()


def spawned(
    rank: int, world_size: int, port: int, rounds: int, device_type: str, quick: bool
) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))  # fmt: skip
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    run(rounds, device_type, quick)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--device-type", default="emu", help="the emulated device's type name")
    parser.add_argument("--quick", action="store_true", help="1 MiB only, 3 rounds")
    args = parser.parse_args(argv)
    rounds = 3 if args.quick else args.rounds
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    mp.spawn(spawned, args=(2, port, rounds, args.device_type, args.quick), nprocs=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
