"""Training-step time on the emulated device vs on the CPU: the fallback's overhead, as a ratio.

Run: ``python benchmarks/emulated.py [--quick]``. The same model, data and optimizer step run on
``cpu``, on ``emu:0`` (anyaccel.testing.emulated) and on ``emu:0`` with strict memory (device
memory protected outside kernels: an mprotect per tensor per op, a copy of each CPU kernel's
result into protected pages), interleaved step by step so background load hits all alike; the
ratios are the emulated medians over the CPU median (the goal is <= 1.5x: the kernels are the
same, so the ratio is the cost of wrapping every op). Strict memory is switched per step (each
allocation stays as it was made), so the three run in one process. Models: an MLP of about 10M
parameters, and GPT-2-small-shaped transformer blocks (d_model 768, 12 heads, MLP 3072).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

SRC = str(Path(__file__).resolve().parents[1] / "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)

from anyaccel.testing.emulated import install  # noqa: E402

Factory = Callable[[], tuple[torch.nn.Module, torch.Tensor, torch.Tensor]]


def mlp() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """An MLP of 11.5M parameters (1024 -> 3072 -> 2048 -> 1024), batch 64."""
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 3072),
        torch.nn.GELU(),
        torch.nn.Linear(3072, 2048),
        torch.nn.GELU(),
        torch.nn.Linear(2048, 1024),
    )
    return model, torch.randn(64, 1024), torch.randn(64, 1024)


def gpt2_blocks(count: int) -> Factory:
    """``count`` GPT-2-small-shaped pre-norm blocks, batch 4 x 128 tokens."""

    def make() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
        layer = torch.nn.TransformerEncoderLayer(
            768, 12, 3072, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        model = torch.nn.TransformerEncoder(layer, count, enable_nested_tensor=False)
        return model, torch.randn(4, 128, 768), torch.randn(4, 128, 768)

    return make


def stepper(factory: Factory, device: str, strict: bool = False) -> Callable[[], None]:
    """One training step (forward, MSE loss, backward, AdamW) of a fresh seeded model; ``strict``:
    its device memory (model, optimizer state, activations) allocated with strict memory."""
    from anyaccel.emulated.runtime import native

    switch = native().set_strict_memory if device != "cpu" else (lambda on: None)
    switch(strict)
    torch.manual_seed(0)
    model, inputs, targets = factory()
    model = model.to(device)
    inputs, targets = inputs.to(device), targets.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    switch(False)

    def step() -> None:
        switch(strict)
        try:
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            loss.backward()
            optimizer.step()
            loss.item()
        finally:
            switch(False)

    return step


def median_ms(steps: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    """Median step time per device, the devices interleaved step by step after 2 warm-ups."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(2):
        for step in steps.values():
            step()
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append((time.perf_counter() - start) * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and one block")
    args = parser.parse_args(argv)
    install("emu", 1)
    repeats = 5 if args.quick else 20
    models: list[tuple[str, Factory, int]] = [
        ("MLP, 11.5M parameters, batch 64", mlp, sum(p.numel() for p in mlp()[0].parameters())),
    ]
    blocks = 1 if args.quick else 2
    gpt = gpt2_blocks(blocks)
    models.append(
        (
            f"GPT-2-small blocks x{blocks}, 4 x 128 tokens",
            gpt,
            sum(p.numel() for p in gpt()[0].parameters()),
        )
    )
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {repeats} steps each\n")
    print(
        "| model | parameters | cpu ms/step | emu ms/step | ratio emu/cpu "
        "| strict ms/step | ratio strict/cpu | ratio strict/emu |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for label, factory, parameters in models:
        steps = {
            "cpu": stepper(factory, "cpu"),
            "emu": stepper(factory, "emu:0"),
            "strict": stepper(factory, "emu:0", strict=True),
        }
        figures = median_ms(steps, repeats)
        cpu, emu, strict = figures["cpu"], figures["emu"], figures["strict"]
        print(
            f"| {label} | {parameters / 1e6:.1f}M | {cpu:.1f} | {emu:.1f} | {emu / cpu:.2f}x "
            f"| {strict:.1f} | {strict / cpu:.2f}x | {strict / emu:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
