"""anyaccel on an NVIDIA GPU: every figure beside its baseline, measured in the same run.

- hot calls (``current_stream``, ``synchronize``, ``memory_allocated``, ``device_name``,
  ``get_accelerator``) against calling ``torch.cuda`` directly (ns per call);
- the fused Adam op (``FusedAdamBuilder``) against ``torch.optim.Adam(fused=True)`` on GPT-2
  small's 148 tensors: ms per step, and the bandwidth the step's bytes reach as a fraction of
  this GPU's measured device-to-device copy bandwidth;
- host-to-device and device-to-host copies from pinned buffers made through our API against
  buffers pinned by torch and against pageable memory (GB/s);
- a ZeRO-Offload training step (``tests/gpu/offload.py``, wall clock: the step runs on the
  host) with and without the gradient copies overlapping backward.

Without a CUDA device it prints why and exits 0: a benchmark has nothing to measure there
(``tools/gpu_proof.py`` is what fails on a machine without a GPU). ``--json PATH`` also writes
every figure as JSON. Run: ``python benchmarks/gpu.py [--quick] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20


def no_gpu_reason() -> str | None:
    """Why there is nothing to measure here, or ``None`` when torch sees an NVIDIA GPU."""
    if torch.version.hip is not None:
        return f"torch {torch.__version__} is a ROCm build; this benchmark is for NVIDIA CUDA"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device"
    return None


def load_by_path(name: str, path: Path) -> ModuleType:
    """Import a repository file that is not on ``sys.path`` (the GPU suite's offload step)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def best_ns_per_call(calls: list[Callable[[], Any]], number: int, repeat: int) -> list[float]:
    """Best-of-``repeat`` ns per call of each function, timed interleaved round by round."""
    best = [math.inf] * len(calls)
    for _ in range(repeat):
        for index, call in enumerate(calls):
            best[index] = min(best[index], timeit.timeit(call, number=number) / number * 1e9)
    return best


def gpu_ms(work: Callable[[], Any], repeat: int, warmup: int = 2) -> float:
    """Median milliseconds of ``work`` on the GPU, timed with CUDA events."""
    for _ in range(warmup):
        work()
    times = []
    for _ in range(repeat):
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        work()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(statistics.median(times))


def wall_ms(work: Callable[[], Any], repeat: int, warmup: int = 2) -> float:
    """Median wall-clock milliseconds of ``work`` until the GPU is idle (host work included)."""
    for _ in range(warmup):
        work()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - started) * 1e3)
    return float(statistics.median(times))


# ------------------------------------------------------------------ hot calls
def hot_calls(number: int, repeat: int) -> list[dict[str, Any]]:
    """Each hot call through anyaccel and through ``torch.cuda``: ns per call and the ratio."""
    import anyaccel

    acc = anyaccel.get_accelerator()
    module_global = torch.cuda

    def raw_accelerator() -> ModuleType:
        return module_global

    def raw_device_name() -> str:
        return f"cuda:{torch.cuda.current_device()}"

    pairs: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
        ("current_stream()", acc.current_stream, torch.cuda.current_stream),
        ("synchronize()", acc.synchronize, torch.cuda.synchronize),
        ("memory_allocated()", acc.memory_allocated, torch.cuda.memory_allocated),
        ("current_device_name()", acc.current_device_name, raw_device_name),
        ("get_accelerator()", anyaccel.get_accelerator, raw_accelerator),
    ]
    rows = []
    for label, ours, raw in pairs:
        ours_ns, raw_ns = best_ns_per_call([ours, raw], number, repeat)
        rows.append({"call": label, "anyaccel_ns": ours_ns, "torch_ns": raw_ns})
    return rows


# ------------------------------------------------------------------ bandwidth
def copy_bandwidth_gbs(repeat: int) -> float:
    """Device-to-device copy bandwidth (bytes read plus written per second), in GB/s."""
    source = torch.empty(1024 * MIB, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    ms = gpu_ms(lambda: target.copy_(source), repeat)
    return 2 * source.numel() / (ms / 1e3) / 1e9


def fused_adam_row(
    op: ModuleType, shapes: list[tuple[int, ...]], dtype: torch.dtype, repeat: int, copy_gbs: float
) -> dict[str, Any]:
    """One dtype's row: our op and torch's fused Adam stepping the same tensors."""
    size = torch.finfo(dtype).bits // 8
    elements = sum(math.prod(shape) for shape in shapes)
    params = [torch.randn(shape, device="cuda").to(dtype) for shape in shapes]
    grads = [torch.randn_like(p) for p in params]
    states = [
        (torch.zeros(p.shape, device="cuda"), torch.zeros(p.shape, device="cuda")) for p in params
    ]
    step = [0]

    def ours_step() -> None:
        step[0] += 1
        for p, g, (m, v) in zip(params, grads, states, strict=True):
            op.fused_adam_step(p, g, m, v, step[0], 1e-3, 0.9, 0.999, 1e-8, 0.0, False, True)

    theirs = [p.clone().requires_grad_(True) for p in params]
    for p, g in zip(theirs, grads, strict=True):
        p.grad = g
    reference = torch.optim.Adam(theirs, lr=1e-3, fused=True)
    ours_ms, torch_ms = gpu_ms(ours_step, repeat), gpu_ms(reference.step, repeat)
    # bytes each step must move: param read+write, grad read, two moments read+write
    ours_bytes = elements * (3 * size + 4 * 4)  # our moments are fp32
    torch_bytes = elements * (3 * size + 4 * size)  # torch's are in the param dtype
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "tensors": len(shapes),
        "elements": elements,
        "anyaccel_ms": ours_ms,
        "torch_ms": torch_ms,
        "anyaccel_fraction_of_copy": ours_bytes / (ours_ms / 1e3) / 1e9 / copy_gbs,
        "torch_fraction_of_copy": torch_bytes / (torch_ms / 1e3) / 1e9 / copy_gbs,
    }


def fused_adam(repeat: int, copy_gbs: float) -> list[dict[str, Any]]:
    """Our fused Adam and torch's on GPT-2 small's shapes, fp32 and bf16 parameters."""
    from anyaccel.ops.cuda import FusedAdamBuilder

    models = load_by_path("gpu_suite_models", REPO / "tests" / "gpu" / "models.py")
    op = FusedAdamBuilder().load()
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        rows.append(fused_adam_row(op, models.gpt2_small_shapes(), dtype, repeat, copy_gbs))
        torch.cuda.empty_cache()
    return rows


def host_copies(repeat: int) -> list[dict[str, Any]]:
    """256 MiB host<->device copies: our pinned buffer, torch's pinned buffer, pageable memory."""
    import anyaccel

    acc = anyaccel.get_accelerator()
    count = 256 * MIB
    device = torch.empty(count, dtype=torch.uint8, device="cuda")
    ours = acc.pin_empty(count, dtype=torch.uint8)
    theirs = torch.empty(count, dtype=torch.uint8).pin_memory()
    pageable = torch.empty(count, dtype=torch.uint8)
    rows = []
    for direction in ("host-to-device", "device-to-host"):
        figures = {}
        for label, host in (("anyaccel", ours), ("torch", theirs), ("pageable", pageable)):
            source, target = (host, device) if direction == "host-to-device" else (device, host)
            ms = gpu_ms(functools.partial(target.copy_, source, non_blocking=True), repeat)
            figures[f"{label}_gbs"] = count / (ms / 1e3) / 1e9
        rows.append({"direction": direction, **figures})
    return rows


def offload_step_ms(offload: ModuleType, overlap: bool, repeat: int) -> tuple[float, int]:
    """Milliseconds per ZeRO-Offload training step of a 4 x 2048 bf16 MLP, and its size."""
    import anyaccel

    width = 2048
    model = offload.make_model(seed=0, width=width, depth=4)
    optimizer = offload.OffloadedAdam(
        anyaccel.get_accelerator(), list(model.parameters()), 1e-4, overlap
    )
    x = torch.randn(64, width, device="cuda", dtype=torch.bfloat16)

    def train_step() -> None:
        optimizer.wait_for_parameters()
        model(x).float().square().mean().backward()
        optimizer.step()

    return wall_ms(train_step, repeat), sum(p.numel() for p in model.parameters())


def offload_steps(repeat: int) -> list[dict[str, Any]]:
    """A ZeRO-Offload training step with the gradient copies serial and overlapped (ms)."""
    offload = load_by_path("gpu_suite_offload", REPO / "tests" / "gpu" / "offload.py")
    serial_ms, parameters = offload_step_ms(offload, False, repeat)
    overlapped_ms, _ = offload_step_ms(offload, True, repeat)
    return [{"parameters": parameters, "serial_ms": serial_ms, "overlapped_ms": overlapped_ms}]


# ------------------------------------------------------------------ output
def print_tables(results: dict[str, Any]) -> None:
    """The figures as Markdown tables with ratio columns (``benchmarks/run_all.py`` reads them)."""
    print("# Hot calls: anyaccel vs torch.cuda")
    print("| call | anyaccel ns | torch.cuda ns | ratio |")
    print("|---|---:|---:|---:|")
    for row in results["hot_calls"]:
        ratio = row["anyaccel_ns"] / row["torch_ns"]
        print(
            f"| {row['call']} | {row['anyaccel_ns']:.1f} | {row['torch_ns']:.1f} | {ratio:.2f}x |"
        )
    print()
    print(f"# Fused Adam on GPT-2 small (copy bandwidth {results['copy_gbs']:.0f} GB/s)")
    print(
        "| params | anyaccel ms | torch fused ms | ratio | anyaccel of copy bw | torch of copy bw |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for row in results["fused_adam"]:
        ratio = row["anyaccel_ms"] / row["torch_ms"]
        print(
            f"| {row['dtype']} | {row['anyaccel_ms']:.3f} | {row['torch_ms']:.3f} | {ratio:.2f}x "
            f"| {row['anyaccel_fraction_of_copy']:.0%} | {row['torch_fraction_of_copy']:.0%} |"
        )
    print()
    print("# Host copies, 256 MiB")
    print("| direction | anyaccel pinned GB/s | torch pinned GB/s | pageable GB/s | ratio |")
    print("|---|---:|---:|---:|---:|")
    for row in results["host_copies"]:
        ratio = row["anyaccel_gbs"] / row["torch_gbs"]
        print(
            f"| {row['direction']} | {row['anyaccel_gbs']:.1f} | {row['torch_gbs']:.1f} "
            f"| {row['pageable_gbs']:.1f} | {ratio:.2f}x |"
        )
    print()
    print("# ZeRO-Offload step")
    print("| parameters | serial ms | overlapped ms | ratio |")
    print("|---|---:|---:|---:|")
    for row in results["offload"]:
        ratio = row["overlapped_ms"] / row["serial_ms"]
        print(
            f"| {row['parameters']} | {row['serial_ms']:.2f} | {row['overlapped_ms']:.2f} "
            f"| {ratio:.2f}x |"
        )


def main(argv: list[str] | None = None) -> int:
    """Measure everything (or say why not) and print the tables; 0 unless measuring fails."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    args = parser.parse_args(argv)
    reason = no_gpu_reason()
    if reason is not None:
        print(f"no GPU: {reason}; nothing measured")
        if args.json is not None:
            args.json.write_text(json.dumps({"gpu": False, "reason": reason}, indent=1) + "\n")
        return 0
    number, repeat = (2_000, 3) if args.quick else (20_000, 7)
    gpu_repeat = 5 if args.quick else 20
    copy_gbs = copy_bandwidth_gbs(gpu_repeat)
    results: dict[str, Any] = {
        "gpu": True,
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hot_calls": hot_calls(number, repeat),
        "copy_gbs": copy_gbs,
        "fused_adam": fused_adam(gpu_repeat, copy_gbs),
        "host_copies": host_copies(gpu_repeat),
        "offload": offload_steps(gpu_repeat),
    }
    print(f"{results['device']}, torch {results['torch']}, CUDA {results['cuda']}")
    print()
    print_tables(results)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
