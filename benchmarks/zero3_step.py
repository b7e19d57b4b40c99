"""A DeepSpeed ZeRO-3 CPU training step on ``anyaccel_shm`` against gloo, 2 ranks on this machine.

DeepSpeed is found through ``ANYACCEL_DEEPSPEED_PYTHON`` (an interpreter with DeepSpeed
installed) or this interpreter; without either it says so and exits 0. Each round launches
one torchrun job per backend (gloo first, then ``anyaccel_shm``, interleaved round by round so
load changes hit both alike); each job trains the same MLP (about 4.2 M parameters, fp32,
ZeRO-3 with torch's Adam, anyaccel's CPU accelerator) and reports the median of its timed
steps. The table shows the median over rounds of each backend and gloo's time over ours.
Run: ``python benchmarks/zero3_step.py [--rounds 3] [--steps 10]``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def child(steps: int, backend: str) -> None:
    """One rank of a job: ``steps`` timed ZeRO-3 steps after two warm-up steps."""
    import warnings

    warnings.simplefilter("ignore")
    import torch

    from anyaccel.integrations.deepspeed import install

    install()
    import deepspeed

    import anyaccel.distributed  # noqa: F401  (registers anyaccel_shm with torch)

    deepspeed.init_distributed(dist_backend=backend)
    torch.manual_seed(0)
    width = 1024
    layers: list[torch.nn.Module] = []
    for _ in range(4):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))
    config = {
        "train_micro_batch_size_per_gpu": 16,
        "steps_per_print": 10**6,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-4, "torch_adam": True}},
        "zero_optimization": {"stage": 3},
    }
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=config
    )
    rank = torch.distributed.get_rank()
    batch = torch.randn(16, width, generator=torch.Generator().manual_seed(rank))
    times = []
    for step in range(steps + 2):
        torch.distributed.barrier()
        start = time.perf_counter()
        loss = engine(batch).square().mean()
        engine.backward(loss)
        engine.step()
        if step >= 2:
            times.append(time.perf_counter() - start)
    median = torch.tensor([statistics.median(times)], dtype=torch.float64)
    torch.distributed.all_reduce(median, op=torch.distributed.ReduceOp.MAX)
    if rank == 0:
        print(json.dumps({"backend": torch.distributed.get_backend(), "step": float(median)}))
    sys.stdout.flush()
    engine.destroy()
    torch.distributed.destroy_process_group()
    os._exit(0)  # DeepSpeed's engines keep gloo groups alive to exit: see docs/distributed.md


def launch(python: str, steps: int, backend: str) -> float:
    """One 2-rank torchrun job on ``backend``; its median step time in seconds."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    path = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", PYTHONPATH=path)
    command = [
        python, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
        "127.0.0.1", "--master-port", str(port), __file__, "--child", backend,
        "--steps", str(steps),
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{backend} job failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(lines[-1])
    if result["backend"] != backend:
        raise SystemExit(f"asked for {backend}, the job ran on {result['backend']}")
    return float(result["step"])


def deepspeed_python() -> str | None:
    """An interpreter that can import DeepSpeed, or None."""
    configured = os.environ.get("ANYACCEL_DEEPSPEED_PYTHON")
    if configured:
        return configured
    probe = subprocess.run([sys.executable, "-c", "import deepspeed"], capture_output=True)
    return sys.executable if probe.returncode == 0 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.steps, args.child)
        return 0
    python = deepspeed_python()
    if python is None:
        print("skipped: DeepSpeed is not importable here; set ANYACCEL_DEEPSPEED_PYTHON")
        return 0
    theirs, ours = [], []
    for _ in range(args.rounds):
        theirs.append(launch(python, args.steps, "gloo"))
        ours.append(launch(python, args.steps, "anyaccel_shm"))
    g, o = statistics.median(theirs), statistics.median(ours)
    print(f"ZeRO-3 step, 2 ranks, fp32 MLP of 4.2 M parameters, {args.rounds} rounds "
          f"x {args.steps} steps")  # fmt: skip
    print(f"{'gloo ms':>9} {'shm ms':>9} {'speed-up':>9}")
    print(f"{g * 1e3:>9.1f} {o * 1e3:>9.1f} {g / o:>8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
