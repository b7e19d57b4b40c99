"""The ``anyaccel_shm`` torch.distributed backend against gloo and DeepSpeed, 2 ranks on this host.

Two parts, in the same processes (default group: ``anyaccel_shm``; a gloo group over the same
ranks), every contender interleaved round by round so that load changes hit all alike:

1. **all_reduce side by side** (fp32 and bf16, 16 KiB to 64 MiB per rank): gloo, ours (a plain
   ``dist.all_reduce``, through torch's dispatch), DeepSpeed's own shared-memory all-reduce
   (``ShareMemCommBuilder``'s ``torch.ops.deepspeed.inference_all_reduce_``, built and called
   as DeepSpeed does, where DeepSpeed is installed) and the memory floor (each rank copies its
   input into a slot-sized buffer and adds the peers' buffers into its tensor with torch, chunk
   by chunk: the least memory traffic a shared-memory all_reduce needs, timed with torch's ops,
   so at small sizes mostly torch's per-op cost and at large ones what torch's loops reach).
   Each result is first checked bit for bit against gloo's (DeepSpeed's too). The table gives
   each median and best sample in microseconds and the ratios DeepSpeed/ours and gloo/ours
   (above 1: ours is faster) and ours/floor.
2. The other collectives (fp32, ``--sizes`` MiB) against gloo, and a DDP training step.

``--breakdown`` adds, after part 1, where a small all_reduce's time goes: the same call entered
at each layer of torch's path (``dist.all_reduce``'s Python wrapper, the ProcessGroup's dispatch,
anyaccel's c10d Backend, the kernel itself) beside DeepSpeed's op, up to 1 MiB.

DeepSpeed's op is set up as DeepSpeed's ``TorchBackend`` does: build the op before the process
group, then ``initialize(world_size, rank)``. Its ``initialize`` uses shared memory only when
``LOCAL_SIZE`` (set by DeepSpeed's own launcher, not by torchrun) equals the world size;
without it the op is never set up and ``inference_all_reduce_`` dereferences an unset
workspace: the process dies with SIGSEGV. So this script sets ``LOCAL_SIZE``.

``--load N`` starts N busy processes for the whole run (the regime of a shared machine).
Run: ``python benchmarks/collectives.py [--ranks 2] [--rounds 7] [--sizes 1,64] [--load N]
[--quick] [--all-reduce-only] [--breakdown] [--spec S]`` (spawns the ranks itself). With
DeepSpeed: run it with an interpreter that has DeepSpeed
(``$ANYACCEL_DEEPSPEED_PYTHON benchmarks/collectives.py``, with ``PYTHONPATH=src``).
``--quick``: 16 KiB and 1 MiB, 3 rounds, part 1 only.
``--spec cpu:anyaccel_shm,cuda:gloo`` runs the default group beside another device's backend.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import statistics
import subprocess
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


def memory_floor(
    numel: int,
    size: int,
    rounds: int,
    group: Any,
    dtype: torch.dtype = torch.float32,
    calls: int = 1,
) -> tuple[float, float]:
    """Median and best time for this host to copy ``numel`` values into a buffer and add ``size``.

    The least memory traffic a shared-memory all_reduce needs: its input copied into a slot,
    and the peers' slots added into the tensor, chunk by chunk as the kernel does (one slot's
    worth at a time, so chunks stay in cache as they do for the kernel). Timed with torch's own
    copy and add, so a kernel whose loops beat torch's can come in under it. Every rank runs it at
    the same moment (as a collective's ranks share memory bandwidth); the slowest rank counts.
    """
    from anyaccel.distributed.shm.group import slot_bytes

    chunk = slot_bytes(size) // torch.tensor([], dtype=dtype).element_size()
    tensor = torch.randn(numel).to(dtype)
    slots = [torch.randn(chunk).to(dtype) for _ in range(size)]

    def copy_and_add() -> None:
        for start in range(0, numel, chunk):
            part = tensor[start : start + chunk]
            count = part.numel()
            slots[0][:count].copy_(part)
            for slot in slots[1:]:  # its own values from the tensor, the peers' from slots
                part.add_(slot[:count])

    copy_and_add()
    times = [time_calls(lambda _: copy_and_add(), group, calls) for _ in range(rounds)]
    return slowest_rank([statistics.median(times), min(times)], group)


def slowest_rank(values: list[float], group: Any) -> tuple[float, float]:
    """The largest of each value over the ranks (a collective is as slow as its slowest rank)."""
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group)
    first, second = tensor.tolist()
    return first, second


#: Bytes per rank of the side-by-side all_reduce table (``--quick``: the first and the fourth).
SIDE_SIZES = (16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20)
QUICK_SIDE_SIZES = (16 << 10, 1 << 20)


def load_deepspeed_op() -> tuple[Any, str]:
    """DeepSpeed's ``ShareMemCommBuilder`` module, built as DeepSpeed's ``TorchBackend`` builds it
    (before the process group: anyaccel then leaves DeepSpeed's ``torch.ops.deepspeed`` ops
    alone), or None and why not."""
    try:
        from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder
    except Exception as exc:  # absent, or an install that does not import here
        return None, f"DeepSpeed is not importable here ({type(exc).__name__}: {exc})"
    try:
        return ShareMemCommBuilder().load(), ""
    except Exception as exc:  # its JIT build failed
        return None, f"DeepSpeed's ShareMemCommBuilder did not build ({exc})"


def remove_deepspeed_segment(rank: int) -> None:
    """Unlink this rank's DeepSpeed segment, which DeepSpeed leaves in /dev/shm (66 MiB a rank).

    The name is DeepSpeed's ``shm_initialize``'s: prefix, uid, MASTER_ADDR, MASTER_PORT, rank.
    """
    env = os.environ
    name = f"deepspeed_allreduce_buffer_{os.getuid()}_{env['MASTER_ADDR']}_{env['MASTER_PORT']}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(f"/dev/shm/{name}_{rank}")


def label(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def cell(median: float | None, best: float | None) -> str:
    """``median (best)`` in microseconds, or "-" for a contender that did not run."""
    if median is None or best is None:
        return "-"
    return f"{median * 1e6:.1f} ({best * 1e6:.1f})"


def ratio(numerator: float | None, denominator: float | None) -> str:
    return "-" if numerator is None or denominator is None else f"{numerator / denominator:.2f}x"


def all_reduce_contenders(tensor: torch.Tensor, gloo: Any, deepspeed: bool) -> dict[str, Call]:
    """all_reduce SUM of ``tensor`` in place: on gloo, on ours, and through DeepSpeed's op (as
    DeepSpeed's ``TorchBackend.inference_all_reduce`` calls it) when ``deepspeed``."""
    contenders: dict[str, Call] = {
        "gloo": lambda _: dist.all_reduce(tensor, group=gloo),
        "ours": lambda _: dist.all_reduce(tensor),
    }
    if deepspeed:
        op = torch.ops.deepspeed.inference_all_reduce_
        contenders["deepspeed"] = lambda _: op(tensor)
    return contenders


def interleaved(
    contenders: dict[str, Call], rounds: int, group: Any, calls: int
) -> dict[str, tuple[float, float]]:
    """Each contender's median and best time per call (the slowest rank's), ``calls`` calls a
    sample, the contenders taking turns round by round so that load changes hit them alike."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, call in contenders.items():
            samples[name].append(time_calls(call, group, calls))
    return {name: slowest_rank([statistics.median(v), min(v)], group)
            for name, v in samples.items()}  # fmt: skip


#: The ``vector_kernel_level`` DeepSpeed's ``TorchBackend`` requires of its op for each dtype.
DEEPSPEED_LEVELS = {torch.float32: 1, torch.bfloat16: 2}


def deepspeed_level(deepspeed: Any) -> int:
    """The ``vector_kernel_level`` of DeepSpeed's loaded op, 0 without one."""
    return int(deepspeed.vector_kernel_level()) if deepspeed is not None else 0


def side_by_side(sizes: tuple[int, ...], rounds: int, gloo: Any, deepspeed: Any, why: str) -> None:
    """Part 1: all_reduce SUM on gloo, ours, DeepSpeed's op and the floor, interleaved."""
    rank, size = dist.get_rank(), dist.get_world_size()
    level = deepspeed_level(deepspeed)
    if rank == 0:
        print(
            f"\n## all_reduce SUM side by side, {size} ranks: median (best) us per call, "
            "the slower rank's"
        )
        print(f"DeepSpeed: {why or f'ShareMemCommBuilder, vector_kernel_level {level}'}")
        print(
            "| dtype | size | gloo us | ours us | DeepSpeed us | floor us | DS/ours | "
            "gloo/ours | ours/floor |"
        )
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    notes = []
    for dtype in (torch.float32, torch.bfloat16):
        ds_ok = deepspeed is not None and level >= DEEPSPEED_LEVELS[dtype]
        for nbytes in sizes:
            numel = nbytes // torch.tensor([], dtype=dtype).element_size()
            gen = torch.Generator().manual_seed(rank + nbytes)
            source = torch.randn(numel, generator=gen).to(dtype)
            tensor = source.clone()
            calls = max(2, min(200, (8 << 20) // nbytes))
            contenders = all_reduce_contenders(tensor, gloo, ds_ok)
            results = {}
            for name, call in contenders.items():  # each once from the same input: same bits
                tensor.copy_(source)
                call(None)
                results[name] = tensor.clone()
            if size == 2 and not torch.equal(results["ours"], results["gloo"]):
                raise SystemExit(f"all_reduce {dtype} {label(nbytes)} differs from gloo's")
            if size == 2 and ds_ok and not torch.equal(results["deepspeed"], results["gloo"]):
                notes.append(f"DeepSpeed's {dtype} {label(nbytes)} result differs from gloo's")
            timed = interleaved(contenders, rounds, gloo, calls)  # values grow: timing only
            floor = memory_floor(numel, size, rounds, gloo, dtype, calls)
            if rank == 0:
                g, o = timed["gloo"], timed["ours"]
                d = timed.get("deepspeed", (None, None))
                print(
                    f"| {str(dtype).replace('torch.', '')} | {label(nbytes)} | {cell(*g)} | "
                    f"{cell(*o)} | {cell(*d)} | {cell(*floor)} | {ratio(d[0], o[0])} | "
                    f"{ratio(g[0], o[0])} | {ratio(o[0], floor[0])} |",
                    flush=True,
                )
        if deepspeed is not None and not ds_ok and rank == 0:
            notes.append(
                f"DeepSpeed skips {dtype}: its kernels need vector_kernel_level "
                f">= {DEEPSPEED_LEVELS[dtype]} (this CPU: {level})"
            )
    if rank == 0:
        for note in notes:
            print(f"note: {note}")


BREAKDOWN_HEADER = (
    "| dtype | size | dist.all_reduce us | ProcessGroup.allreduce us | Backend.allreduce us | "
    "kernel us | DeepSpeed us |"
)


def layer_contenders(tensor: torch.Tensor, deepspeed: bool) -> dict[str, Call | None]:
    """One all_reduce SUM of ``tensor`` entered at each layer of torch's path down to our kernel
    (None where this group has no such layer), and DeepSpeed's op as its callers call it."""
    from anyaccel.distributed.shm.backend import shm_process_group
    from anyaccel.distributed.shm.codes import kernel_codes

    group = dist.group.WORLD
    opts = dist.AllreduceOptions()
    backend = group._get_backend(torch.device("cpu"))
    shm = shm_process_group(group)
    communicator = shm.shm.communicator if shm is not None else None
    address, numel = tensor.data_ptr(), tensor.numel()
    codes = kernel_codes()
    code, total = codes.dtypes[tensor.dtype], codes.ops[dist.ReduceOp.SUM]
    timeout, threads = (shm.shm.timeout, shm.shm.threads) if shm is not None else (0.0, 1)
    kernel: Call | None = None
    if communicator is not None:
        kernel = lambda _: communicator.all_reduce(address, numel, code, total, timeout, threads)  # noqa: E731
    op = torch.ops.deepspeed.inference_all_reduce_ if deepspeed else None
    return {
        "dist": lambda _: dist.all_reduce(tensor),
        "group": lambda _: group.allreduce([tensor], opts).wait(),
        "backend": (lambda _: backend.allreduce([tensor], opts).wait())
        if type(backend).__name__ == "ShmBackend"
        else None,
        "kernel": kernel,
        "deepspeed": (lambda _: op(tensor)) if op is not None else None,
    }


def breakdown(sizes: tuple[int, ...], rounds: int, gloo: Any, deepspeed: Any) -> None:
    """``--breakdown``: where a small all_reduce's time goes. The same call entered at each layer
    (torch's ``dist.all_reduce`` wrapper, the ProcessGroup's dispatch, our c10d Backend, the
    kernel itself), interleaved with DeepSpeed's op; the differences are each layer's cost."""
    rank = dist.get_rank()
    level = deepspeed_level(deepspeed)
    if rank == 0:
        print("\n## where an all_reduce's time goes: median (best) us per call, the slower rank's")
        print(BREAKDOWN_HEADER)
        print("|---|---|---:|---:|---:|---:|---:|", flush=True)
    for dtype in (torch.float32, torch.bfloat16):
        ds_ok = deepspeed is not None and level >= DEEPSPEED_LEVELS[dtype]
        for nbytes in (n for n in sizes if n <= 1 << 20):
            tensor = torch.zeros(
                nbytes // torch.tensor([], dtype=dtype).element_size(), dtype=dtype
            )
            layers = layer_contenders(tensor, ds_ok)
            present = {name: call for name, call in layers.items() if call is not None}
            for call in present.values():
                call(None)
            timed = interleaved(present, rounds, gloo, max(2, min(400, (8 << 20) // nbytes)))
            if rank == 0:
                cells = [cell(*timed.get(name, (None, None))) for name in layers]
                print(f"| {str(dtype).replace('torch.', '')} | {label(nbytes)} | "
                      + " | ".join(cells) + " |", flush=True)  # fmt: skip


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


def run(args: argparse.Namespace, sizes_mib: list[int]) -> None:
    from anyaccel.distributed import backend_choice, init_distributed, shm_process_group

    rounds, spec, quick, load = args.rounds, args.spec, args.quick, args.load

    deepspeed, why = load_deepspeed_op()  # before the group, as DeepSpeed's TorchBackend does
    info = init_distributed(spec, shm_backend=True)
    rank, size = info.rank, info.world_size
    if deepspeed is not None:
        deepspeed.initialize(size, rank)  # shared memory only where LOCAL_SIZE == world size
    gloo = dist.new_group(backend="gloo")
    ours = dist.group.WORLD
    shm = shm_process_group(ours)
    form = type(ours._get_backend(torch.device("cpu"))).__name__
    if rank == 0:
        print(f"ranks: {size}, default group: {dist.get_backend()} ({form}; "
              f"{shm.status if shm is not None else '?'}; {backend_choice()['reason']}), "
              f"torch {torch.__version__}, {os.cpu_count()} CPUs, "
              f"load: {load} busy processes")  # fmt: skip
    try:
        side_by_side(QUICK_SIDE_SIZES if quick else SIDE_SIZES, rounds, gloo, deepspeed, why)
        if args.breakdown:
            breakdown(QUICK_SIDE_SIZES if quick else SIDE_SIZES, rounds, gloo, deepspeed)
    finally:
        if deepspeed is not None:
            dist.barrier(group=gloo)  # every rank has mapped every segment long since
            remove_deepspeed_segment(rank)
    if quick or args.all_reduce_only:
        dist.destroy_process_group()
        return
    if rank == 0:
        print(f"\n{'collective':>24} {'size':>7} {'gloo ms':>9} {'shm ms':>9} {'speed-up':>9}")
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
            g, o = slowest_rank([statistics.median(theirs_t), statistics.median(ours_t)], gloo)
            if rank == 0:
                print(f"{name:>24} {mib:>4} MiB {g * 1e3:>9.3f} {o * 1e3:>9.3f} {g / o:>8.2f}x",
                      flush=True)  # fmt: skip
    g, o = ddp_steps(rounds, gloo, ours)
    if rank == 0:
        print(f"{'DDP step (6.3 M params)':>24} {'':>7} {g * 1e3:>9.3f} {o * 1e3:>9.3f} "
              f"{g / o:>8.2f}x", flush=True)  # fmt: skip
    dist.destroy_process_group()


def spawned(rank: int, world_size: int, port: int, args: argparse.Namespace) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), DS_ACCELERATOR="cpu",
                      LOCAL_SIZE=str(world_size))  # fmt: skip  # DeepSpeed's launcher sets it
    torch.set_num_threads(1)
    sizes = [int(part) for part in args.sizes.split(",")]
    run(args, sizes)


def busy_processes(count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` processes that each keep one core busy until stopped (``--load``), or until
    this process is gone (their parent changes), should it die before it stops them."""
    spin = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"
    return [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]


def spawn_under_load(spawned: Callable[..., None], args: argparse.Namespace) -> None:
    """Run ``spawned(rank, args.ranks, port, args)`` on ``args.ranks`` processes over a free
    port, with ``args.load`` busy processes meanwhile (stopped however the ranks end)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    busy = busy_processes(args.load)
    try:
        mp.spawn(spawned, args=(args.ranks, port, args), nprocs=args.ranks)
    finally:
        for process in busy:
            process.send_signal(signal.SIGKILL)
            process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--sizes", default="1,64", help="MiB per rank of part 2, comma-separated")
    parser.add_argument("--load", type=int, default=0, help="busy processes to run meanwhile")
    parser.add_argument("--quick", action="store_true", help="16 KiB and 1 MiB, 3 rounds, part 1")
    parser.add_argument("--all-reduce-only", action="store_true", help="part 1 only")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="after part 1: one all_reduce entered at each layer of torch's path (up to 1 MiB)",
    )
    parser.add_argument(
        "--spec",
        default=None,
        help="the default group's backend spec, such as cpu:anyaccel_shm,cuda:gloo (anyaccel_shm "
        "beside another device's backend); default: anyaccel_shm alone",
    )
    args = parser.parse_args(argv)
    if args.load < 0 or args.ranks < 1 or args.rounds < 1:
        parser.error(f"--load, --ranks and --rounds must be positive: {vars(args)}")
    if args.quick:
        args.rounds = min(args.rounds, 3)
    spawn_under_load(spawned, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
