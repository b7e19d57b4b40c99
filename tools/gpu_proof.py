"""Prove anyaccel on this machine's NVIDIA GPU in one command, and write what was proven.

Runs the GPU suite (``pytest -m gpu tests/gpu``), ``benchmarks/gpu.py`` and ``anyaccel report``
against this checkout's ``src`` (no install, nothing fetched: the machine's own torch, pytest
and whatever DeepSpeed, Lightning or accelerate it has), then writes ``report.md`` and
``report.json`` to ``--out``: the GPU, driver, CUDA, nvcc, versions, test counts with every
failure and skip reason, and the benchmark figures.

Exit status: 0 when every test passed (skips for a missing framework are listed, not failed)
and the benchmark and report ran; 1 when anything failed; 3 when there is no NVIDIA GPU here,
so nothing was proven (the report says why); 2 for bad arguments.

Run: ``python tools/gpu_proof.py [--out DIR] [--quick] [--skip-benchmark] [-k EXPR]``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"

EXIT_OK, EXIT_FAILED, EXIT_NO_GPU = 0, 1, 3

#: Packages whose versions the report names (read from their metadata, never imported).
PACKAGES = (
    "torch",
    "pytest",
    "hypothesis",
    "ninja",
    "deepspeed",
    "lightning",
    "accelerate",
    "transformers",
    "triton",
    "psutil",
)

#: A skip reason that means the suite thought there was no GPU: a failure where there is one.
NO_GPU_SKIP = "needs an NVIDIA GPU"


# ------------------------------------------------------------------ facts about the machine
def parse_driver_version(text: str) -> str | None:
    """The driver version in ``/proc/driver/nvidia/version`` or ``nvidia-smi`` output."""
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    if match is None:
        match = re.search(r"Driver Version:\s*(\d+\.\d+(?:\.\d+)?)", text)
    if match is None:
        match = re.fullmatch(r"\s*(\d+\.\d+(?:\.\d+)?)\s*", text)
    return match.group(1) if match else None


def nvidia_driver_version() -> str | None:
    """The NVIDIA kernel driver's version: from ``/proc``, else ``nvidia-smi``; ``None`` if none."""
    try:
        found = parse_driver_version(Path("/proc/driver/nvidia/version").read_text())
    except OSError:
        found = None
    if found is None and shutil.which("nvidia-smi"):
        done = _run_quietly(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        found = parse_driver_version(done.splitlines()[0]) if done else None
    return found


def parse_nvcc_version(text: str) -> str | None:
    """``12.4`` from ``nvcc --version``'s ``Cuda compilation tools, release 12.4, V12.4.131``."""
    match = re.search(r"release (\d+\.\d+)", text)
    return match.group(1) if match else None


def nvcc_path() -> str | None:
    """The nvcc torch's JIT would use: ``$CUDA_HOME``/``$CUDA_PATH``, /usr/local/cuda, PATH."""
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.access(os.path.join(home, "bin", "nvcc"), os.X_OK):
            return os.path.join(home, "bin", "nvcc")
    return shutil.which("nvcc")


def nvcc_version() -> str | None:
    """nvcc's CUDA release (e.g. ``12.4``), or ``None`` without an nvcc."""
    path = nvcc_path()
    return parse_nvcc_version(_run_quietly([path, "--version"])) if path else None


def _run_quietly(command: Sequence[str]) -> str:
    """A short command's stdout, or ``""`` when it cannot run."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def package_versions(names: Sequence[str] = PACKAGES) -> dict[str, str | None]:
    """Each package's installed version, ``None`` where it is not installed."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_commit() -> str | None:
    """The checkout's commit, if this is a git checkout and git is here."""
    out = _run_quietly(["git", "-C", str(REPO), "rev-parse", "HEAD"]) if shutil.which("git") else ""
    return out.strip() or None


def gpu_facts() -> dict[str, Any]:
    """torch's build and the GPUs it sees; ``problem`` says why there is none to prove on."""
    import torch

    facts: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "devices": [],
        "problem": None,
    }
    if torch.version.hip is not None:
        facts["problem"] = (
            f"torch {torch.__version__} is a ROCm build; this proof is for NVIDIA CUDA"
        )
    elif torch.version.cuda is None:
        facts["problem"] = (
            f"torch {torch.__version__} is a CPU-only build (no CUDA): no CUDA device exists "
            "for it; install a CUDA build of torch on a machine with an NVIDIA GPU"
        )
    elif not torch.cuda.is_available():
        hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" (CUDA_VISIBLE_DEVICES={hidden!r})" if hidden is not None else ""
        facts["problem"] = (
            f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device{where}; "
            "check that nvidia-smi lists the GPU"
        )
    else:
        for index in range(torch.cuda.device_count()):
            properties = torch.cuda.get_device_properties(index)
            facts["devices"].append(
                {
                    "index": index,
                    "name": properties.name,
                    "capability": f"{properties.major}.{properties.minor}",
                    "total_memory": int(properties.total_memory),
                }
            )
    return facts


# ------------------------------------------------------------------ test results
@dataclass
class TestCounts:
    """What one pytest run did: counts, and the failures and skips with their messages."""

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    failures: list[dict[str, str]] = field(default_factory=list)
    skips: list[dict[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.errors + self.skipped


def parse_junit(path: Path) -> TestCounts:
    """Counts, failures and skip reasons from pytest's ``--junitxml`` file."""
    root = ElementTree.parse(path).getroot()
    counts = TestCounts()
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        counts.seconds += float(case.get("time", "0") or 0)
        outcome = next(
            (child for child in case if child.tag in ("failure", "error", "skipped")), None
        )
        if outcome is None:
            counts.passed += 1
            continue
        message = (outcome.get("message") or outcome.text or "").strip()
        if outcome.tag == "skipped":
            counts.skipped += 1
            counts.skips.append({"test": name, "reason": message})
        else:
            if outcome.tag == "failure":
                counts.failed += 1
            else:
                counts.errors += 1
            counts.failures.append({"test": name, "kind": outcome.tag, "message": message[:2000]})
    return counts


# ------------------------------------------------------------------ the report
def verdict(report: Mapping[str, Any]) -> tuple[int, list[str]]:
    """The exit status for ``report`` and the reasons it is not 0."""
    if report["gpu"]["problem"]:
        return EXIT_NO_GPU, [f"no CUDA device: {report['gpu']['problem']}"]
    reasons = []
    tests = report.get("tests")
    if tests is None or tests.get("problem"):
        reasons.append(f"tests did not run: {(tests or {}).get('problem', 'not attempted')}")
    else:
        if tests["failed"] or tests["errors"]:
            reasons.append(f"{tests['failed']} test(s) failed, {tests['errors']} error(s)")
        if tests["passed"] == 0:
            reasons.append("no GPU test passed")
        wrongly = [s["test"] for s in tests["skips"] if NO_GPU_SKIP in s["reason"]]
        if wrongly:
            reasons.append(f"{len(wrongly)} test(s) skipped as if there were no GPU")
    for step in ("benchmark", "cli_report"):
        result = report.get(step)
        if result is not None and result.get("problem"):
            reasons.append(f"{step}: {result['problem']}")
    return (EXIT_FAILED if reasons else EXIT_OK), reasons


def render_markdown(report: Mapping[str, Any]) -> str:
    """The report as Markdown: verdict, machine, versions, tests, figures."""
    status, reasons = verdict(report)
    title = {EXIT_OK: "PASSED", EXIT_FAILED: "FAILED", EXIT_NO_GPU: "NO GPU: nothing proven"}
    lines = [f"# anyaccel GPU proof: {title[status]}", ""]
    lines += [f"- {reason}" for reason in reasons]
    if reasons:
        lines.append("")
    gpu = report["gpu"]
    lines += [
        f"- when: {report['started']} (UTC), {report['seconds']:.0f} s",
        f"- anyaccel: {report['anyaccel']['version']} from {report['anyaccel']['path']}"
        f" (commit {report['anyaccel']['commit'] or 'unknown'})",
        f"- python {report['python']}, {report['platform']}",
        f"- torch {gpu['torch']} (CUDA {gpu['torch_cuda'] or '-'}),"
        f" driver {report['driver'] or '-'}, nvcc {report['nvcc'] or '-'}",
    ]
    for device in gpu["devices"]:
        memory = device["total_memory"] / 2**30
        lines.append(
            f"- GPU {device['index']}: {device['name']}, compute capability "
            f"{device['capability']}, {memory:.1f} GiB"
        )
    if not gpu["devices"]:
        lines.append("- GPU: none")
    installed = [f"{name} {version}" for name, version in report["packages"].items() if version]
    missing = [name for name, version in report["packages"].items() if not version]
    lines.append(
        f"- packages: {', '.join(installed) or '-'}; not installed: {', '.join(missing) or '-'}"
    )
    tests = report.get("tests")
    if tests is not None:
        lines += ["", "## Tests (pytest -m gpu tests/gpu)", ""]
        if tests.get("problem"):
            lines.append(f"Not run: {tests['problem']}")
        else:
            lines.append(
                f"{tests['passed']} passed, {tests['failed']} failed, {tests['errors']} errors, "
                f"{tests['skipped']} skipped in {tests['seconds']:.0f} s"
            )
            for failure in tests["failures"]:
                first = failure["message"].splitlines()[0] if failure["message"] else ""
                lines.append(f"- {failure['kind'].upper()} {failure['test']}: {first}")
            for skip in tests["skips"]:
                lines.append(f"- skipped {skip['test']}: {skip['reason']}")
    bench = report.get("benchmark")
    if bench is not None:
        lines += ["", "## Benchmark (benchmarks/gpu.py)", ""]
        problem = bench.get("problem")
        lines.append(f"Failed: {problem}" if problem else bench["tables"])
    return "\n".join(lines).rstrip() + "\n"


def write_report(report: Mapping[str, Any], out: Path) -> None:
    """``report.json`` and ``report.md`` in ``out`` (created if needed)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (out / "report.md").write_text(render_markdown(report), encoding="utf-8")


# ------------------------------------------------------------------ the steps
def child_env() -> dict[str, str]:
    """This environment with the checkout's ``src`` first on ``PYTHONPATH``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    return env


def run_tests(out: Path, keyword: str | None, timeout: float) -> dict[str, Any]:
    """The GPU suite in a child pytest; its counts from the JUnit XML it writes."""
    if importlib.util.find_spec("pytest") is None:
        return {"problem": "pytest is not installed for this interpreter"}
    junit = out / "junit.xml"
    command = [sys.executable, "-m", "pytest", str(REPO / "tests" / "gpu"), "-m", "gpu"]
    # the suite is self-contained: tests/conftest.py (which needs hypothesis) is not loaded
    command += ["--confcutdir", str(REPO / "tests" / "gpu"), "-p", "no:cacheprovider"]
    command += ["-rfEs", "--junitxml", str(junit)] + (["-k", keyword] if keyword else [])
    log = out / "pytest.log"
    with log.open("w", encoding="utf-8") as handle:
        try:
            done = subprocess.run(
                command,
                cwd=REPO,
                env=child_env(),
                stdout=handle,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return {"problem": f"pytest ran past {timeout:g} s (log: {log})"}
    if not junit.exists():
        return {"problem": f"pytest exited {done.returncode} without results (log: {log})"}
    counts = asdict(parse_junit(junit))
    counts["exit_status"] = done.returncode
    counts["log"] = str(log)
    return counts


def run_benchmark(out: Path, quick: bool, timeout: float) -> dict[str, Any]:
    """``benchmarks/gpu.py`` in a child; its tables and its JSON figures."""
    figures = out / "benchmark.json"
    command = [sys.executable, str(REPO / "benchmarks" / "gpu.py"), "--json", str(figures)]
    try:
        done = subprocess.run(
            command + (["--quick"] if quick else []),
            cwd=REPO,
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"problem": f"ran past {timeout:g} s"}
    (out / "benchmark.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    if done.returncode != 0 or not figures.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        return {"problem": f"exit {done.returncode}: " + " | ".join(tail)}
    tables = "\n".join(
        line for line in done.stdout.splitlines() if line.startswith(("#", "|")) or not line
    )
    return {"tables": tables.strip(), "figures": json.loads(figures.read_text())}


def run_cli_report(out: Path) -> dict[str, Any]:
    """``anyaccel report --json --devices``, saved beside the report."""
    command = [sys.executable, "-m", "anyaccel", "report", "--json", "--devices"]
    try:
        done = subprocess.run(
            command, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired:
        return {"problem": "anyaccel report ran past 300 s"}
    if done.returncode != 0:
        return {"problem": f"anyaccel report exit {done.returncode}: {done.stderr.strip()[-500:]}"}
    (out / "anyaccel-report.json").write_text(done.stdout, encoding="utf-8")
    chosen = json.loads(done.stdout)["report"]["accelerator"]
    if chosen != "cuda":
        return {"problem": f"anyaccel chose {chosen!r}, not 'cuda'", "accelerator": chosen}
    return {"accelerator": chosen}


def anyaccel_facts() -> dict[str, Any]:
    """Which anyaccel the children import (this checkout's ``src``), and its version."""
    sys.path.insert(0, str(SRC))
    import anyaccel

    return {
        "version": anyaccel.__version__,
        "path": str(Path(anyaccel.__file__).parent),
        "commit": git_commit(),
    }


def main(argv: list[str] | None = None) -> int:
    """Run every step that applies, write the report, and return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(f"gpu-proof-{stamp}"),
        help="directory for report.md, report.json and the logs",
    )
    parser.add_argument("--quick", action="store_true", help="fewer benchmark repetitions")
    parser.add_argument("--skip-benchmark", action="store_true", help="run the tests only")
    parser.add_argument("-k", dest="keyword", help="only tests matching this pytest -k expression")
    parser.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        help="seconds the tests (and, apart, the benchmark) may take",
    )
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error(f"--timeout must be positive, got {args.timeout:g}")
    started = time.perf_counter()
    report: dict[str, Any] = {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "anyaccel": anyaccel_facts(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "gpu": gpu_facts(),
        "driver": nvidia_driver_version(),
        "nvcc": nvcc_version(),
        "nvcc_path": nvcc_path(),
        "packages": package_versions(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    if not report["gpu"]["problem"]:
        report["tests"] = run_tests(args.out, args.keyword, args.timeout)
        if not args.skip_benchmark:
            report["benchmark"] = run_benchmark(args.out, args.quick, args.timeout)
        report["cli_report"] = run_cli_report(args.out)
    report["seconds"] = time.perf_counter() - started
    status, reasons = verdict(report)
    report["exit_status"], report["reasons"] = status, reasons
    write_report(report, args.out)
    print(render_markdown(report))
    print(f"report: {args.out / 'report.md'} and {args.out / 'report.json'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
