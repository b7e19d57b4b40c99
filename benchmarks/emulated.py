"""Training-step time on the emulated device vs on the CPU: the fallback's overhead, as a ratio.

Run: ``python benchmarks/emulated.py [--quick]``. The same model, data and optimizer step run on
``cpu`` and on ``emu:0`` (anyaccel.testing.emulated), interleaved step by step so background load
hits both alike; the ratio is the emulated median over the CPU median (the goal is <= 1.5x: the
kernels are the same, so the ratio is the cost of wrapping every op). Models: an MLP of about
10M parameters, and GPT-2-small-shaped transformer blocks (d_model 768, 12 heads, MLP 3072).
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


def stepper(factory: Factory, device: str) -> Callable[[], None]:
    """One training step (forward, MSE loss, backward, AdamW) of a fresh seeded model."""
    torch.manual_seed(0)
    model, inputs, targets = factory()
    model = model.to(device)
    inputs, targets = inputs.to(device), targets.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        loss.item()

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
    print("| model | parameters | cpu ms/step | emu ms/step | ratio emu/cpu |")
    print("|---|---|---|---|---|")
    for label, factory, parameters in models:
        figures = median_ms(
            {"cpu": stepper(factory, "cpu"), "emu": stepper(factory, "emu:0")}, repeats
        )
        ratio = figures["emu"] / figures["cpu"]
        print(
            f"| {label} | {parameters / 1e6:.1f}M | {figures['cpu']:.1f} | {figures['emu']:.1f} "
            f"| {ratio:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
