"""First-use build time of anyaccel's native parts, from a cold cache, beside a trivial extension.

Run: ``python benchmarks/first_build.py [--quick]``. Each job below builds what one kind of
user job needs with ``anyaccel ops --build`` in a fresh process, against an empty
``TORCH_EXTENSIONS_DIR`` (a cold cache: what a newcomer or a CI run without a cache waits
for). The floor is a one-function extension that includes ``<torch/extension.h>``, built the
same way in the same run: most of a small extension's build is torch's headers, so the ratio
says how far each job is from that floor. Goals (issue 45): a CPU DDP job ready in 30 s, the
emulated core in 45 s, on an idle 2-core machine. Timing varies with load: run it on a quiet
machine (``uptime``'s load is printed).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: (job, the builders it needs, the goal in seconds or None).
JOBS: tuple[tuple[str, tuple[str, ...], float | None], ...] = (
    ("CPU DDP job (anyaccel_shm)", ("ShmCommBuilder", "ShmC10dBackendBuilder"), 30.0),
    ("emulated device core", ("EmulatedDeviceBuilder",), 45.0),
    ("emulated collectives", ("HostViewBackendBuilder",), None),
    ("CPU Adam/Adagrad/Lion", ("CPUAdamBuilder",), None),
)

_FLOOR = """
import sys, time
from torch.utils.cpp_extension import load_inline
began = time.perf_counter()
load_inline("anyaccel_bench_floor", cpp_sources="int one() { return 1; }",
            functions=["one"], verbose=False)
print(time.perf_counter() - began)
"""


def _env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TORCH_EXTENSIONS_DIR"] = str(cache)
    env["DS_ACCELERATOR"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    return env


def build_seconds(builders: tuple[str, ...]) -> float:
    """Wall seconds of ``anyaccel ops --build BUILDERS`` in a fresh process on a cold cache."""
    with tempfile.TemporaryDirectory(prefix="anyaccel-first-build-") as cache:
        command = [sys.executable, "-m", "anyaccel", "ops", "--build", *builders]
        began = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=_env(Path(cache)))
        seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")
    return seconds


def floor_seconds() -> float:
    """Wall seconds to build (and load) a one-function extension on a cold cache."""
    with tempfile.TemporaryDirectory(prefix="anyaccel-first-build-") as cache:
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", _FLOOR], capture_output=True, text=True, env=_env(Path(cache))
        )
        seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"the floor extension failed to build:\n{done.stderr}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the CPU DDP job and the floor only")
    args = parser.parse_args(argv)
    jobs = JOBS[:1] if args.quick else JOBS
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    floor = floor_seconds()
    print("\n| job | builders | cold build s | floor s | ratio build/floor | goal s |")
    print("|---|---|---:|---:|---:|---:|")
    for name, builders, goal in jobs:
        seconds = build_seconds(builders)
        print(
            f"| {name} | {', '.join(builders)} | {seconds:.1f} | {floor:.1f} | "
            f"{seconds / floor:.2f}x | {'-' if goal is None else f'{goal:.0f}'} |"
        )
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
