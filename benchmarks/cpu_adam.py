"""CPU Adam step time: anyaccel vs torch (foreach, fused) and DeepSpeed, plus the offload case.

Run: ``python benchmarks/cpu_adam.py [--quick]``. Every figure comes from this one run: step
times are interleaved across implementations (so background load hits all of them alike),
ratios are the peer's median time over ours, and "% of bandwidth" is the time of a compiled
kernel moving exactly the same bytes with no arithmetic over ours, timed in the same loop.
DeepSpeed's columns appear when ``deepspeed`` is importable (its CPU Adam builds on first use).

Parameter lists: one big tensor, 10 x 1M, 1000 x 10k (the same bytes in many tensors), GPT-2
small's 148 real shapes, and 1000 one-element tensors (the fixed cost per parameter), in fp32
and bf16 (bf16 parameters updated in place with fp32 states, as DeepSpeed does); then bf16 vs
fp16 parameters on 1 x 10M and 1000 x 10k (``--low-precision`` prints only that table).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import torch

SRC = str(Path(__file__).resolve().parents[1] / "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)

from anyaccel.ops.adagrad import CPUAdagrad  # noqa: E402
from anyaccel.ops.adam import CPUAdam, CPUAdamW  # noqa: E402
from anyaccel.ops.cpu import CPUAdamBuilder  # noqa: E402
from anyaccel.ops.lion import CPULion  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _stream import adam_shaped_copy_step, adam_shaped_step, stream_kernels  # noqa: E402

#: Bytes an fp32 Adam step moves per parameter: read p, g, m, v; write p, m, v.
ADAM_BYTES = 28
#: Plus a bf16 copy: 2 bytes written, and 2 more read for the write-allocate unless the kernel
#: uses streaming stores (it does where AVX2/AVX-512 is compiled in and the copy is aligned).
COPY_BYTES = 4
STREAMED_COPY_BYTES = 2
#: torch's separate copy_ pass: read p (4 bytes) and write bf16 (2 + 2 write-allocate).
TORCH_COPY_BYTES = 8

Step = Callable[[], object]
#: Steps per implementation in the fixed-cost table (each ~1-10 ms, after a ~10 ms flush).
FIXED_COST_REPEATS = 100
FIXED_COST_TITLE = (
    "\n## Fixed cost per parameter: 1000 one-element parameters, every optimizer and dtype "
    "(fp32 states; cold: caches evicted before each step; torch fused where it steps that "
    "dtype on the CPU, else foreach)\n"
)


def median_times(steps: dict[str, Step], repeats: int) -> dict[str, float]:
    """Median seconds per call of each step, calls interleaved round-robin after one warm-up."""
    for step in steps.values():
        step()
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            started = time.perf_counter()
            step()
            samples[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in samples.items()}


def measure_bandwidth(repeats: int) -> dict[str, float]:
    """GB/s of STREAM-style kernels on 200 MB arrays (write-allocate counted)."""
    count = 50_000_000
    kernels = stream_kernels(count)
    times = median_times({name: step for name, (step, _) in kernels.items()}, repeats)
    return {name: kernels[name][1] * count / times[name] / 1e9 for name in kernels}


def repeats_for(size: int, repeats: int) -> int:
    """More samples for small sizes, whose sub-millisecond steps are the noisiest."""
    return max(repeats, 200_000_000 // size)


def optimizer_step(
    factory: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer], size: int
) -> tuple[Step, torch.nn.Parameter]:
    """A step closure over one fresh ``size``-element parameter with a random gradient."""
    param = torch.nn.Parameter(torch.randn(size))
    param.grad = torch.randn(size)
    optimizer = factory([param])
    return optimizer.step, param


def deepspeed_factory() -> Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer] | None:
    """DeepSpeed's CPU Adam when deepspeed is installed (its JIT build runs on first use)."""
    try:
        from deepspeed.ops.adam import DeepSpeedCPUAdam
    except ImportError:
        return None
    return lambda params: DeepSpeedCPUAdam(params, lr=1e-3, adamw_mode=False)


def fp32_table(sizes: list[int], repeats: int) -> list[str]:
    """Rows: step time per implementation and our speed-up over each, per size."""
    ds = deepspeed_factory()
    rows = [
        "| params | anyaccel ms | torch foreach ms | torch fused ms | DeepSpeed ms | "
        "vs foreach | vs fused | vs DeepSpeed | anyaccel GB/s | % of bandwidth |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size in sizes:
        steps: dict[str, Step] = {
            "ours": optimizer_step(lambda ps: CPUAdam(ps, lr=1e-3), size)[0],
            "foreach": optimizer_step(lambda ps: torch.optim.Adam(ps, foreach=True), size)[0],
            "fused": optimizer_step(lambda ps: torch.optim.Adam(ps, fused=True), size)[0],
        }
        if ds is not None:
            steps["deepspeed"] = optimizer_step(ds, size)[0]
        steps["roofline"] = adam_shaped_step(size)
        times = median_times(steps, repeats_for(size, repeats))
        ours = times["ours"]
        ds_ms = f"{times['deepspeed'] * 1e3:.2f}" if "deepspeed" in times else "n/a"
        ds_ratio = f"{times['deepspeed'] / ours:.2f}x" if "deepspeed" in times else "n/a"
        gbps = ADAM_BYTES * size / ours / 1e9
        rows.append(
            f"| {size / 1e6:g}M | {ours * 1e3:.2f} | {times['foreach'] * 1e3:.2f} | "
            f"{times['fused'] * 1e3:.2f} | {ds_ms} | {times['foreach'] / ours:.2f}x | "
            f"{times['fused'] / ours:.2f}x | {ds_ratio} | {gbps:.1f} | "
            f"{100 * times['roofline'] / ours:.0f}% |"
        )
        del steps
    return rows


def offload_steps(size: int) -> dict[str, Step]:
    """Our one-pass step writing a bf16 copy, and torch's fused step followed by ``copy_``."""
    ours_param = torch.nn.Parameter(torch.randn(size))
    ours_param.grad = torch.randn(size)
    ours_copy = torch.empty_like(ours_param, dtype=torch.bfloat16)
    ours = CPUAdam([ours_param], lr=1e-3)
    torch_step, torch_param = optimizer_step(lambda ps: torch.optim.Adam(ps, fused=True), size)
    torch_copy = torch.empty_like(torch_param, dtype=torch.bfloat16)

    def torch_offload() -> None:
        torch_step()
        torch_copy.copy_(torch_param.detach())

    return {"ours": lambda: ours.step(fp16_param_groups=[ours_copy]), "torch": torch_offload}


def offload_table(sizes: list[int], repeats: int, copy_bytes: int) -> list[str]:
    """Rows: fp32 master step plus bf16 copy, fused in one pass vs torch fused + ``copy_``.

    The roofline here is a kernel moving the offload step's own bytes (Adam's 28 B plus the copy
    written the same way), so its time over ours cannot pass 100 % but by noise.
    """
    rows = [
        "| params | anyaccel step+bf16 ms | torch fused + copy_ ms | speed-up | "
        "anyaccel GB/s | % of bandwidth |",
        "|---|---|---|---|---|---|",
    ]
    for size in sizes:
        steps = {**offload_steps(size), "roofline": adam_shaped_copy_step(size)}
        times = median_times(steps, repeats_for(size, repeats))
        gbps = (ADAM_BYTES + copy_bytes) * size / times["ours"] / 1e9
        rows.append(
            f"| {size / 1e6:g}M | {times['ours'] * 1e3:.2f} | {times['torch'] * 1e3:.2f} | "
            f"{times['torch'] / times['ours']:.2f}x | {gbps:.1f} | "
            f"{100 * times['roofline'] / times['ours']:.0f}% |"
        )
    return rows


def gpt2_small_shapes() -> list[tuple[int, ...]]:
    """GPT-2 small's 148 parameter shapes (HF Conv1D layout: weight is in x out)."""
    d, vocab, positions, layers = 768, 50257, 1024, 12
    shapes: list[tuple[int, ...]] = [(vocab, d), (positions, d)]
    for _ in range(layers):
        shapes += [(d,), (d,)]  # ln_1
        shapes += [(d, 3 * d), (3 * d,), (d, d), (d,)]  # attn.c_attn, attn.c_proj
        shapes += [(d,), (d,)]  # ln_2
        shapes += [(d, 4 * d), (4 * d,), (4 * d, d), (d,)]  # mlp.c_fc, mlp.c_proj
    shapes += [(d,), (d,)]  # ln_f
    assert len(shapes) == 148
    return shapes


def shape_sets(quick: bool) -> dict[str, list[tuple[int, ...]]]:
    """The parameter lists each optimizer steps, by name."""
    sets: dict[str, list[tuple[int, ...]]] = {
        "1 x 10M": [(10_000_000,)],
        "10 x 1M": [(1_000_000,)] * 10,
        "1000 x 10k": [(10_000,)] * 1000,
        "1000 x 1": [(1,)] * 1000,
    }
    if not quick:
        sets["GPT-2 small (148)"] = gpt2_small_shapes()
    return sets


Factory = Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]


def list_step(factory: Factory, shapes: list[tuple[int, ...]], dtype: torch.dtype) -> Step:
    """A step closure over fresh parameters of ``shapes`` with random gradients."""
    params = [torch.nn.Parameter(torch.randn(shape).to(dtype)) for shape in shapes]
    for param in params:
        param.grad = torch.randn(param.shape).to(dtype)
    return factory(params).step


def peers(dtype: torch.dtype) -> dict[str, Factory]:
    """Ours, torch fused and (when installed) DeepSpeed's CPU Adam, all as L2 Adam."""
    factories: dict[str, Factory] = {
        "anyaccel": lambda ps: CPUAdam(ps, lr=1e-3),
        "torch fused": lambda ps: torch.optim.Adam(ps, lr=1e-3, fused=True),
    }
    ds = deepspeed_factory()
    if ds is not None:
        factories["DeepSpeed"] = ds
    return factories


def shape_set_table(quick: bool, dtype: torch.dtype, repeats: int) -> list[str]:
    """Rows: each parameter list's step time per implementation and our speed-up over each."""
    factories = peers(dtype)
    names = list(factories)
    rows = [
        "| parameters | elements | "
        + " | ".join(f"{name} ms" for name in names)
        + " | "
        + " | ".join(f"vs {name}" for name in names[1:])
        + " | anyaccel µs/param |",
        "|---|---|" + "---|" * (2 * len(names)),
    ]
    for label, shapes in shape_sets(quick).items():
        elements = sum(torch.Size(shape).numel() for shape in shapes)
        steps = {name: list_step(factory, shapes, dtype) for name, factory in factories.items()}
        times = median_times(steps, max(repeats, min(200, 2_000_000_000 // (elements * 28))))
        ours = times["anyaccel"]
        rows.append(
            f"| {label} | {elements / 1e6:.3g}M | "
            + " | ".join(f"{times[name] * 1e3:.3f}" for name in names)
            + " | "
            + " | ".join(f"{times[name] / ours:.2f}x" for name in names[1:])
            + f" | {ours * 1e6 / len(shapes):.2f} |"
        )
        del steps
    return rows


#: Bytes a low-precision Adam step moves per parameter: read p, g (2 each), m, v (4 each);
#: write p (2), m, v (4 each).
LOW_PRECISION_ADAM_BYTES = 22


def low_precision_table(repeats: int) -> list[str]:
    """Rows: our Adam on bf16 and fp16 parameters (fp32 states), steps interleaved.

    Both take the one-pass loop (converting in registers) where the SIMD level has it; fp16
    needs F16C. The ratio is fp16's median time over bf16's in the same run.
    """
    rows = [
        "| parameters | bf16 ms | fp16 ms | fp16 / bf16 | bf16 GB/s | fp16 GB/s |",
        "|---|---|---|---|---|---|",
    ]
    sets = {"1 x 10M": [(10_000_000,)], "1000 x 10k": [(10_000,)] * 1000}
    for label, shapes in sets.items():
        elements = sum(torch.Size(shape).numel() for shape in shapes)
        steps = {
            str(dtype): list_step(lambda ps: CPUAdam(ps, lr=1e-3), shapes, dtype)
            for dtype in (torch.bfloat16, torch.float16)
        }
        times = median_times(steps, max(repeats, 50))
        bf16, fp16 = times["torch.bfloat16"], times["torch.float16"]
        rows.append(
            f"| {label} | {bf16 * 1e3:.2f} | {fp16 * 1e3:.2f} | {fp16 / bf16:.2f} | "
            f"{LOW_PRECISION_ADAM_BYTES * elements / bf16 / 1e9:.1f} | "
            f"{LOW_PRECISION_ADAM_BYTES * elements / fp16 / 1e9:.1f} |"
        )
        del steps
    return rows


def torch_counterpart(name: str, dtype: torch.dtype) -> Factory | None:
    """torch's optimizer for ``name`` (fused where this torch steps ``dtype`` fused on the CPU)."""
    classes = {"Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW, "Adagrad": torch.optim.Adagrad}
    if name not in classes:
        return None  # torch has no Lion
    for options in ({"fused": True}, {"foreach": True}):
        try:  # a trial step: fused CPU kernels vary by torch release and dtype
            probe = torch.nn.Parameter(torch.zeros(2, dtype=dtype))
            probe.grad = torch.zeros(2, dtype=dtype)
            classes[name]([probe], lr=1e-3, **options).step()
        except (RuntimeError, TypeError, ValueError):
            continue
        return lambda ps, c=classes[name], o=options: c(ps, lr=1e-3, **o)  # type: ignore[misc]
    return None


def deepspeed_counterpart(name: str, dtype: torch.dtype) -> Factory | None:
    """DeepSpeed's CPU optimizer for ``name`` when installed and it steps ``dtype`` here."""
    try:
        from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        from deepspeed.ops.lion import DeepSpeedCPULion
    except ImportError:
        return None
    factories: dict[str, Factory] = {
        "Adam": lambda ps: DeepSpeedCPUAdam(ps, lr=1e-3, adamw_mode=False),
        "AdamW": lambda ps: DeepSpeedCPUAdam(ps, lr=1e-3, adamw_mode=True),
        "Adagrad": lambda ps: DeepSpeedCPUAdagrad(ps, lr=1e-3),
        "Lion": lambda ps: DeepSpeedCPULion(ps, lr=1e-3),
    }
    try:
        list_step(factories[name], [(2,)], dtype)()
    except (RuntimeError, TypeError, ValueError):
        return None
    return factories[name]


def cold_median(step: Step, flush: torch.Tensor, repeats: int) -> float:
    """Median seconds of ``step`` when each call follows a pass over ``flush`` (caches evicted)."""
    step()
    samples = []
    for _ in range(repeats):
        flush.add_(1.0)
        started = time.perf_counter()
        step()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def fixed_cost_table(repeats: int) -> list[str]:
    """Rows: step time per parameter of 1000 one-element parameters, per optimizer and dtype.

    "cold" steps follow a pass over a 64 MB buffer, which evicts the parameters', gradients'
    and states' metadata from the caches and TLBs, as a training step's forward and backward
    do: the fixed cost a model with many small tensors pays. "warm" steps run back to back.
    """
    ours: dict[str, Factory] = {
        "Adam": lambda ps: CPUAdam(ps, lr=1e-3),
        "AdamW": lambda ps: CPUAdamW(ps, lr=1e-3),
        "Adagrad": lambda ps: CPUAdagrad(ps, lr=1e-3),
        "Lion": lambda ps: CPULion(ps, lr=1e-3),
    }
    rows = [
        "| optimizer | dtype | anyaccel cold µs/param | anyaccel warm µs/param | "
        "torch cold µs/param | DeepSpeed cold µs/param | vs torch | vs DeepSpeed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    shapes: list[tuple[int, ...]] = [(1,)] * 1000
    flush = torch.zeros(16 << 20)  # 64 MB: more than the last-level cache
    per_param = 1e6 / len(shapes)
    for name, factory in ours.items():
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            factories = {"ours": factory}
            for label, peer in (("torch", torch_counterpart(name, dtype)),
                                ("deepspeed", deepspeed_counterpart(name, dtype))):  # fmt: skip
                if peer is not None:
                    factories[label] = peer
            steps = {label: list_step(f, shapes, dtype) for label, f in factories.items()}
            cold = {k: cold_median(step, flush, repeats) * per_param for k, step in steps.items()}
            warm = median_times({"ours": steps["ours"]}, repeats)["ours"] * per_param
            cells = [f"{cold[k]:.2f}" if k in cold else "n/a" for k in ("torch", "deepspeed")]
            ratios = [f"{cold[k] / cold['ours']:.1f}x" if k in cold else "n/a"
                      for k in ("torch", "deepspeed")]  # fmt: skip
            rows.append(
                f"| {name} | {str(dtype).removeprefix('torch.')} | {cold['ours']:.2f} | "
                f"{warm:.2f} | " + " | ".join(cells + ratios) + " |"
            )
            del steps
    return rows


def timed_subprocess(code: str, extensions_dir: str) -> float:
    """Seconds a snippet reports, run in a fresh interpreter with its own extensions dir."""
    env = {
        **os.environ,
        "TORCH_EXTENSIONS_DIR": extensions_dir,
        "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")])),
    }
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(result.stdout.strip().splitlines()[-1])


LOAD_SNIPPET = """
    import time
    import torch
    started = time.perf_counter()
    {body}
    print(time.perf_counter() - started)
"""


def build_times(include_deepspeed: bool) -> list[str]:
    """First build (empty cache) and cached load, each in a fresh process, for us and DeepSpeed."""
    ours = "from anyaccel.ops.cpu import CPUAdamBuilder; CPUAdamBuilder().load()"
    theirs = (
        "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(verbose=False)"
    )
    rows = ["| op | first build s | cached load s (after `import torch`) |", "|---|---|---|"]
    candidates = [("anyaccel CPUAdamBuilder", ours)]
    if include_deepspeed:
        candidates.append(("DeepSpeed CPUAdamBuilder", theirs))
    for label, body in candidates:
        with tempfile.TemporaryDirectory() as cache:
            snippet = LOAD_SNIPPET.format(body=body)
            first = timed_subprocess(snippet, cache)
            cached = min(timed_subprocess(snippet, cache) for _ in range(3))
        rows.append(f"| {label} | {first:.1f} | {cached:.3f} |")
    return rows


def main() -> None:
    """Print the bandwidth, fp32, offload and build tables."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1M and 10M only, fewer repeats")
    parser.add_argument("--repeats", type=int, default=None, help="timed steps per implementation")
    parser.add_argument("--no-build", action="store_true", help="skip the build-time table")
    parser.add_argument(
        "--low-precision", action="store_true", help="only the bf16 vs fp16 one-pass table"
    )
    parser.add_argument(
        "--lists-only", action="store_true", help="only the parameter-list tables (fp32, bf16)"
    )
    args = parser.parse_args()
    sizes = [1_000_000, 10_000_000] if args.quick else [1_000_000, 10_000_000, 50_000_000]
    repeats = args.repeats or (5 if args.quick else 15)
    CPUAdam([torch.nn.Parameter(torch.zeros(1))])  # build or load before timing anything

    print(
        f"# CPU Adam benchmark: torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{os.cpu_count()} CPUs, median of >= {repeats} interleaved steps\n"
    )
    low_precision_title = (
        f"\n## bf16 vs fp16 parameters, fp32 states ({LOW_PRECISION_ADAM_BYTES} B/param, "
        f"{CPUAdamBuilder().load().simd_level()} kernels)\n"
    )
    if args.low_precision:
        print(low_precision_title)
        print("\n".join(low_precision_table(repeats)))
        return
    if args.lists_only:
        for dtype in (torch.float32, torch.bfloat16):
            print(f"\n## Parameter lists, {str(dtype).removeprefix('torch.')} parameters\n")
            print("\n".join(shape_set_table(args.quick, dtype, repeats)))
        print(FIXED_COST_TITLE)
        print("\n".join(fixed_cost_table(FIXED_COST_REPEATS)))
        return
    bandwidths = measure_bandwidth(repeats)
    print("## Measured memory bandwidth (200 MB arrays)\n\n| kernel | GB/s |\n|---|---|")
    for name, value in bandwidths.items():
        print(f"| {name} | {value:.1f} |")
    print(
        "\n% of bandwidth below: our GB/s over that of the compiled kernel with Adam's access "
        "pattern (p,m,v += g), timed interleaved with the steps at the same size. 1M "
        "parameters partly fit in cache.\n"
    )
    print(f"## fp32 Adam step ({ADAM_BYTES} B/param); ratios > 1 mean anyaccel is faster\n")
    print("\n".join(fp32_table(sizes, repeats)))
    simd = CPUAdamBuilder().load().simd_level()
    copy_bytes = STREAMED_COPY_BYTES if simd in ("avx512", "avx2") else COPY_BYTES
    print(
        f"\n## Offload: fp32 master step + bf16 copy ({ADAM_BYTES + copy_bytes} B/param in one "
        f"pass with {simd} kernels; torch's separate copy_ pass moves {TORCH_COPY_BYTES} B/param "
        "more)\n"
    )
    print("\n".join(offload_table(sizes, repeats, copy_bytes)))
    for dtype in (torch.float32, torch.bfloat16):
        print(
            f"\n## Parameter lists, {str(dtype).removeprefix('torch.')} parameters "
            "(fp32 states); ratios > 1 mean anyaccel is faster\n"
        )
        print("\n".join(shape_set_table(args.quick, dtype, repeats)))
    print(low_precision_title)
    print("\n".join(low_precision_table(repeats)))
    print(FIXED_COST_TITLE)
    print("\n".join(fixed_cost_table(FIXED_COST_REPEATS)))
    if not args.no_build:
        print("\n## Build and load (fresh processes, empty cache for the first build)\n")
        print("\n".join(build_times(deepspeed_factory() is not None and not args.quick)))


if __name__ == "__main__":
    main()
