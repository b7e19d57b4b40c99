"""A training step compiled with inductor on the emulated device vs on the CPU, as a ratio.

Run: ``python benchmarks/emulated_compile.py [--quick]``. The model is compiled with
``torch.compile`` (inductor) on ``cpu`` and on ``emu:0``; each trains with AdamW, the steps
interleaved as in ``benchmarks/emulated.py`` (whose models and timing this reuses). The first
step's time (the compile: Dynamo, inductor and a C++ build per graph, in a fresh cache
directory the two devices share, so the device may reuse a C++ build of the CPU's) is printed
apart. A model that compiles on the CPU but not on the device is named under the table, with
inductor's error. On a torch whose inductor cannot compile for the device it says so
and exits 0.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

SRC = str(Path(__file__).resolve().parents[1] / "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)

from anyaccel.emulated.inductor import inductor_unsupported_reason  # noqa: E402
from anyaccel.emulated.state import torch_problem  # noqa: E402
from anyaccel.testing.emulated import install  # noqa: E402
from emulated import Factory, gpt2_blocks, median_ms, mlp  # noqa: E402


def compiled_stepper(factory: Factory, device: str) -> tuple[Callable[[], None], float]:
    """One compiled training step of a fresh seeded model, and its first step's seconds."""
    torch.manual_seed(0)
    model, inputs, targets = factory()
    model = model.to(device)
    inputs, targets = inputs.to(device), targets.to(device)
    compiled = torch.compile(model, backend="inductor", dynamic=False)  # static on both
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(compiled(inputs), targets)
        loss.backward()
        optimizer.step()
        loss.item()

    start = time.perf_counter()
    step()
    return step, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps, the MLP only")
    args = parser.parse_args(argv)
    reason = torch_problem() or inductor_unsupported_reason()
    if reason is not None:
        print(f"skipped: inductor cannot compile for the emulated device here ({reason})")
        return 0
    cache = tempfile.mkdtemp(prefix="anyaccel-bench-inductor-")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", cache)
    try:
        install("emu", 1)
        repeats = 5 if args.quick else 20
        models: list[tuple[str, Factory]] = [("MLP, 11.5M parameters, batch 64", mlp)]
        if not args.quick:
            models.append(("GPT-2-small block x1, 4 x 128 tokens", gpt2_blocks(1)))
        print(
            f"torch {torch.__version__}, {torch.get_num_threads()} threads, {repeats} steps "
            "each, both compiled with inductor\n"
        )
        print(
            "| model | cpu compile s | emu compile s | cpu ms/step | emu ms/step | ratio emu/cpu |"
        )
        print("|---|---|---|---|---|---|")
        failed: list[str] = []
        for label, factory in models:
            cpu_step, cpu_compile = compiled_stepper(factory, "cpu")
            try:
                emu_step, emu_compile = compiled_stepper(factory, "emu:0")
            except Exception as exc:  # a known gap of inductor's C++ backend off the CPU
                failed.append(f"{label}: compiling on emu:0 failed: {str(exc).splitlines()[0]}")
                continue
            figures = median_ms({"cpu": cpu_step, "emu": emu_step}, repeats)
            ratio = figures["emu"] / figures["cpu"]
            print(
                f"| {label} | {cpu_compile:.1f} | {emu_compile:.1f} | {figures['cpu']:.1f} "
                f"| {figures['emu']:.1f} | {ratio:.2f}x |"
            )
        for line in failed:
            print(f"\n{line} (docs/emulated.md, torch.compile, says why)")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
