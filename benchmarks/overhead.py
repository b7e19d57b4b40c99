"""What anyaccel costs on top of raw torch: cached lookup, contract calls, import.

Every ratio compares two things measured in this run, on this machine:

- ``get_accelerator()`` (cached) against a bare function returning a module global;
- contract calls against the raw torch calls they wrap (goal <= 1.3x);
- ``import anyaccel`` plus the first ``get_accelerator()`` on top of ``import torch``
  (goal <= 10 ms), measured in fresh interpreters.

Where DeepSpeed is installed, the same rows for ``deepspeed.accelerator`` stand beside.
Run: ``python benchmarks/overhead.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import timeit
import warnings
from collections.abc import Callable
from typing import Any

import torch

import anyaccel

_GLOBAL = object()


def bare_global() -> object:
    """The baseline for a cached lookup: a function returning a module global."""
    return _GLOBAL


def per_call_ns(
    functions: list[Callable[[], Any] | None], number: int, repeat: int
) -> list[float | None]:
    """Best-of-``repeat`` nanoseconds per call of each function, timed interleaved.

    Alternating the functions in every round keeps a drifting machine from favouring one.
    """
    best: list[float | None] = [None] * len(functions)
    for _ in range(repeat):
        for i, function in enumerate(functions):
            if function is None:
                continue
            elapsed = timeit.timeit(function, number=number) / number * 1e9
            previous = best[i]
            best[i] = elapsed if previous is None else min(previous, elapsed)
    return best


def raw_calls(name: str) -> dict[str, Callable[[], Any]]:
    """The raw torch calls the contract methods wrap, for the detected backend."""
    module = torch.cpu if name == "cpu" else getattr(torch, name)

    def raw_current_device_name() -> str:
        index = module.current_device()
        return index if isinstance(index, str) else f"{name}:{index}"

    return {
        "device_count": module.device_count,
        "current_device_name": raw_current_device_name,
        "is_available": module.is_available,
        "manual_seed": lambda: torch.manual_seed(0) if name == "cpu" else module.manual_seed(0),
    }


def contract_calls(acc: Any) -> dict[str, Callable[[], Any]]:
    """The same four calls through an accelerator object."""
    return {
        "device_count": acc.device_count,
        "current_device_name": acc.current_device_name,
        "is_available": acc.is_available,
        "manual_seed": lambda: acc.manual_seed(0),
    }


IMPORT_PROBE = """
import time, warnings
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
warnings.simplefilter("ignore")
import {module} as lib
lib.get_accelerator()
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def import_cost_ms(module: str, runs: int) -> tuple[float, float]:
    """Median (torch import, library import + first get_accelerator) in fresh processes."""
    torch_times, lib_times = [], []
    # As an installed package runs: bytecode cached (a warm-up run writes it), nothing forced.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DS_ACCELERATOR", "PYTHONDONTWRITEBYTECODE")
    }
    subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE.format(module=module)], env=env, check=True,
        capture_output=True,
    )  # fmt: skip
    for _ in range(runs):
        out = (
            subprocess.run(
                [sys.executable, "-c", IMPORT_PROBE.format(module=module)],
                capture_output=True,
                text=True,
                check=True,
                env=env,
            )
            .stdout.strip()
            .splitlines()[-1]
            .split()
        )  # libraries may log lines before it
        torch_times.append(float(out[0]) * 1000)
        lib_times.append(float(out[1]) * 1000)
    return statistics.median(torch_times), statistics.median(lib_times)


def deepspeed_get_accelerator() -> Callable[[], Any] | None:
    """DeepSpeed's ``get_accelerator``, if DeepSpeed is installed."""
    try:
        from deepspeed.accelerator import get_accelerator  # type: ignore[import-not-found]
    except Exception:
        return None
    getter: Callable[[], Any] = get_accelerator
    return getter


def main() -> None:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    number, repeat, runs = (20_000, 5, 3) if args.quick else (200_000, 7, 7)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        acc = anyaccel.get_accelerator()
    ds_get = deepspeed_get_accelerator()
    ds_acc = ds_get() if ds_get is not None else None

    rows: list[tuple[str, float, float, float | None, str]] = []

    def measure(label: str, ours: Any, base: Any, theirs: Any, calls: int) -> None:
        ours_ns, base_ns, ds_ns = per_call_ns([ours, base, theirs], calls, repeat)
        assert ours_ns is not None and base_ns is not None
        rows.append((label, ours_ns, base_ns, ds_ns, "<= 1.3x"))

    measure("get_accelerator() cached", anyaccel.get_accelerator, bare_global, ds_get, number)
    raw = raw_calls(acc._name)
    wrapped = contract_calls(acc)
    theirs = contract_calls(ds_acc) if ds_acc is not None else {}
    for name, raw_call in raw.items():
        measure(f"{name}()", wrapped[name], raw_call, theirs.get(name), number // 4)

    print(f"anyaccel {anyaccel.__version__}, torch {torch.__version__}, accelerator {acc._name}")
    print(f"deepspeed: {'installed' if ds_get else 'not installed (its column is empty)'}")
    print()
    header = f"{'call':<26}{'anyaccel ns':>13}{'raw ns':>12}{'ratio':>9}"
    print(header + f"{'deepspeed ns':>14}{'ratio':>10}  goal")
    for label, ours, base, ds, goal in rows:
        ds_cells = f"{ds:>14.1f}{ds / base:>9.2f}x" if ds is not None else f"{'-':>14}{'-':>10}"
        print(f"{label:<26}{ours:>13.1f}{base:>12.1f}{ours / base:>8.2f}x{ds_cells}  {goal}")

    torch_ms, ours_ms = import_cost_ms("anyaccel", runs)
    print()
    print(f"import torch (median of {runs} fresh processes): {torch_ms:.1f} ms")
    print(f"import anyaccel + first get_accelerator(): {ours_ms:.1f} ms on top (goal <= 10 ms)")
    if ds_get is not None:
        _, ds_ms = import_cost_ms("deepspeed.accelerator", runs)
        print(f"import deepspeed.accelerator + first get_accelerator(): {ds_ms:.1f} ms on top")


if __name__ == "__main__":
    main()
