"""Run every benchmark in benchmarks/ and write one report: tables, ratio plots, machine, versions.

Each ``benchmarks/<name>.py`` (not ``_private.py``, not this file) runs in its own process with a
time limit; ``--quick`` is passed to those that accept it. The tables each one prints (Markdown
``| a | b |`` rows, or aligned columns under a header that names a ``ratio``) are gathered into
``<out>/index.md`` with a PNG per table plotting its ratio columns (matplotlib: the ``bench``
extra); every ratio compares two things measured in the same run. The default ``--out`` is
``docs/benchmarks``, the documentation site's Benchmarks page.

Run: ``python benchmarks/run_all.py [--quick] [--timeout SECONDS] [--only NAME ...]``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
_RATIO_CELL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*x\s*$")


@dataclass
class Table:
    """One table a benchmark printed: its title (the heading above it), header and rows."""

    title: str
    header: list[str]
    rows: list[list[str]]

    def ratio_columns(self) -> list[int]:
        """Columns holding ratios: headed 'ratio', or whose every filled cell reads like '1.2x'."""
        found = []
        for index, name in enumerate(self.header[1:], start=1):
            cells = [row[index] for row in self.rows if index < len(row)]
            filled = [cell for cell in cells if cell.strip() not in ("", "-", "\u2013")]
            if not filled:
                continue
            headed = _names_a_ratio(name)
            if (headed or all(_RATIO_CELL.match(cell) for cell in filled)) and any(
                ratio_value(cell) is not None for cell in filled
            ):
                found.append(index)
        return found

    def column_label(self, index: int) -> str:
        """A ratio column's name, told apart from a same-named one by the column before it."""
        name = self.header[index].strip()
        if self.header.count(self.header[index]) > 1 and index > 1:
            return f"{name} ({self.header[index - 1].strip()})"
        return name

    def markdown(self) -> str:
        """The table as Markdown."""
        lines = ["| " + " | ".join(self.header) + " |", "|" + "---|" * len(self.header)]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines)


@dataclass
class Result:
    """What one benchmark did: its command, outcome, time, output and the tables in it."""

    name: str
    command: list[str]
    status: str  # "ok", "failed (exit N)", "timed out after N s"
    seconds: float
    stdout: str
    stderr: str
    tables: list[Table] = field(default_factory=list)


def _names_a_ratio(header: str) -> bool:
    """A column header that announces ratios: 'ratio', 'speed-up', 'speedup', 'x'."""
    name = header.strip().lower()
    return "ratio" in name or name in ("x", "speed-up", "speedup")


def ratio_value(cell: str) -> float | None:
    """``'1.23x'`` or ``'1.23'`` -> 1.23; anything else -> None."""
    text = cell.strip().removesuffix("x").strip()
    try:
        return float(text)
    except ValueError:
        return None


def discover(bench_dir: Path) -> list[Path]:
    """The benchmark scripts: every ``*.py`` here except private modules and this runner."""
    return sorted(
        path
        for path in bench_dir.glob("*.py")
        if not path.name.startswith("_") and path.name != Path(__file__).name
    )


def parse_tables(text: str) -> list[Table]:
    """Markdown tables, and aligned-column tables whose header names a ratio, in order."""
    tables: list[Table] = []
    title = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        if line.startswith("#"):
            title = line.lstrip("#").strip()
        if line.startswith("|"):
            block = []
            while i < len(lines) and lines[i].startswith("|"):
                block.append([cell.strip() for cell in lines[i].strip().strip("|").split("|")])
                i += 1
            rows = [row for row in block[1:] if not all(set(cell) <= set("-: ") for cell in row)]
            tables.append(Table(title, block[0], rows))
            continue
        columns = re.split(r"\s{2,}", line.strip())
        if len(columns) >= 3 and any(_names_a_ratio(column) for column in columns):
            rows = []
            i += 1
            while i < len(lines) and lines[i].strip():
                rows.append(re.split(r"\s{2,}", lines[i].strip()))
                i += 1
            tables.append(Table(title, columns, [row for row in rows if len(row) >= 2]))
            continue
        i += 1
    return tables


def accepts_quick(script: Path) -> bool:
    """Whether the script has a ``--quick`` option (read from its source, nothing run)."""
    return '"--quick"' in script.read_text(encoding="utf-8")


def run_one(script: Path, quick: bool, timeout: float) -> Result:
    """Run one benchmark in a fresh interpreter with a time limit; never raises for its faults."""
    command = [sys.executable, str(script)] + (
        ["--quick"] if quick and accepts_quick(script) else []
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO
        )
    except subprocess.TimeoutExpired as expired:
        out = expired.stdout.decode() if isinstance(expired.stdout, bytes) else expired.stdout
        err = expired.stderr.decode() if isinstance(expired.stderr, bytes) else expired.stderr
        return Result(
            script.stem, command, f"timed out after {timeout:g} s",
            time.perf_counter() - started, out or "", err or "", parse_tables(out or ""),
        )  # fmt: skip
    status = "ok" if done.returncode == 0 else f"failed (exit {done.returncode})"
    return Result(
        script.stem, command, status, time.perf_counter() - started,
        done.stdout, done.stderr, parse_tables(done.stdout),
    )  # fmt: skip


def plot(table: Table, path: Path) -> bool:
    """A horizontal bar chart of the table's ratio columns, 1.0 marked; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    columns = table.ratio_columns()
    labels = [row[0] for row in table.rows]
    height = 0.8 / max(len(columns), 1)
    figure, axes = plt.subplots(figsize=(8, 1.0 + 0.45 * len(labels) * max(1, len(columns) / 2)))
    for slot, index in enumerate(columns):
        values = [ratio_value(row[index]) if index < len(row) else None for row in table.rows]
        positions = [n + slot * height for n, value in enumerate(values) if value is not None]
        axes.barh(
            positions,
            [value for value in values if value is not None],
            height=height,
            label=table.column_label(index),
        )
    axes.axvline(1.0, color="black", linewidth=0.8)
    axes.set_yticks([n + height * (len(columns) - 1) / 2 for n in range(len(labels))])
    axes.set_yticklabels(labels, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("ratio, as in the table (1.0 = parity with the baseline of the same run)")
    axes.set_title(table.title or path.stem.rsplit("-", 1)[0], fontsize=9)
    if len(columns) > 1:
        axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine_lines() -> list[str]:
    """The machine and the versions the figures belong to."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            cpu = next(
                (line.split(":", 1)[1].strip() for line in info if line.startswith("model name")),
                cpu,
            )
    except OSError:
        pass
    lines = [
        f"- machine: {cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
        f"- Python {platform.python_version()}",
    ]
    try:
        import psutil

        lines[0] += f", {psutil.virtual_memory().total / 2**30:.0f} GiB memory"
    except ImportError:
        pass
    try:
        import torch

        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only"
        build = f"ROCm {torch.version.hip}" if torch.version.hip else build
        lines.append(f"- torch {torch.__version__} ({build}), {torch.get_num_threads()} threads")
    except ImportError:
        lines.append("- torch: not installed")
    for distribution in ("anyaccel", "deepspeed", "matplotlib"):
        lines.append(f"- {distribution} {_version(distribution)}")
    return lines


def write_report(results: list[Result], out: Path, argv: list[str]) -> Path:
    """``out/index.md`` plus one PNG per table with ratios; returns the Markdown file."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.png"):
        stale.unlink()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = " ".join(["python benchmarks/run_all.py", *argv])
    parts = [
        "# Benchmarks",
        "",
        "Every figure below is a ratio of two things measured in the same run on the same "
        "machine; absolute times on a shared machine drift, ratios much less. Nothing here is "
        "asserted by the test suite. To produce this page on your machine:",
        "",
        f'```bash\npip install -e ".[bench]"\n{command}\n```',
        "",
        f"Latest run: {when}.",
        "",
        *machine_lines(),
        "",
        "| benchmark | status | seconds | command |",
        "|---|---|---:|---|",
    ]
    for result in results:
        shown = " ".join(["python", Path(result.command[1]).name, *result.command[2:]])
        parts.append(f"| {result.name} | {result.status} | {result.seconds:.0f} | `{shown}` |")
    plotted = missing_plot = 0
    for result in results:
        parts += ["", f"## {result.name}", ""]
        if result.status != "ok":
            errors = result.stderr.strip().splitlines()[-20:]
            parts += [
                f"**{result.status}**" + ("; the end of its error output:" if errors else ""),
                "",
            ]
            if errors:
                parts += ["```text", *errors, "```", ""]
        for number, table in enumerate(result.tables, start=1):
            if table.title:
                parts += [f"### {table.title}", ""]
            parts += [table.markdown(), ""]
            if table.ratio_columns():
                image = f"{result.name}-{number}.png"
                if plot(table, out / image):
                    parts += [f"![{table.title or result.name}]({image})", ""]
                    plotted += 1
                else:
                    missing_plot += 1
        text = "\n".join(
            line for line in result.stdout.splitlines() if not line.startswith(("|", "#"))
        ).strip()
        if text:
            parts += [
                '??? note "Full output"',
                "    ```text",
                *("    " + line for line in result.stdout.rstrip().splitlines()),
                "    ```",
                "",
            ]
    if missing_plot:
        parts += ["", f"{missing_plot} plot(s) skipped: matplotlib is missing "
                  '(pip install -e ".[bench]").']  # fmt: skip
    report = out / "index.md"
    report.write_text("\n".join(parts).rstrip() + "\n", encoding="utf-8")
    return report


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks, write the report; exit 1 if one failed or timed out."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="pass --quick where accepted")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds per benchmark (default 1800, 900 with --quick)")  # fmt: skip
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these benchmarks")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks",
                        help="report folder (default: docs/benchmarks, the docs page)")  # fmt: skip
    parser.add_argument("--bench-dir", type=Path, default=HERE, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    timeout = args.timeout or (900.0 if args.quick else 1800.0)
    if timeout <= 0:
        parser.error(f"--timeout must be positive, got {timeout:g}")
    scripts = discover(args.bench_dir)
    if args.only:
        known = {script.stem for script in scripts}
        unknown = sorted(set(args.only) - known)
        if unknown:
            parser.error(
                f"no benchmark named {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        scripts = [script for script in scripts if script.stem in args.only]
    if not scripts:
        parser.error(f"no benchmark scripts in {args.bench_dir}")
    results = []
    for script in scripts:
        print(f"== {script.stem} ...", flush=True)
        result = run_one(script, args.quick, timeout)
        print(f"   {result.status} in {result.seconds:.0f} s, {len(result.tables)} table(s)")
        results.append(result)
    given = list(argv if argv is not None else sys.argv[1:])
    shown = [
        arg for n, arg in enumerate(given) if "--bench-dir" not in given[max(n - 1, 0) : n + 1]
    ]
    report = write_report(results, args.out, shown)
    print(f"report: {report}")
    return 0 if all(result.status == "ok" for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
