"""benchmarks/run_all.py: discovery, table parsing, time limits and the report it writes."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

RUN_ALL = Path(__file__).resolve().parents[2] / "benchmarks" / "run_all.py"


@pytest.fixture(scope="module")
def run_all() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_all", RUN_ALL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["run_all"] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def write(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return path


MARKDOWN_BENCH = """
    import sys
    quick = "--quick" in sys.argv
    print("# Adam step")
    print("| size | ours ms | torch ms | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| 1M | 1.0 | 2.0 | {2.0 if quick else 1.5:.2f}x |")
    print("| 10M | 10.0 | 12.0 | 1.20x |")
"""

ALIGNED_BENCH = """
    print("call                 anyaccel ns   raw ns   ratio  deepspeed ns   ratio  goal")
    print("device_count()               38.2     30.7   1.24x         192.1   6.26x  <= 1.3x")
    print("is_available()               63.3     58.2   1.09x             -       -  <= 1.3x")
    print()
    print("import torch: 900 ms")
"""


def test_discovery_skips_private_modules_and_the_runner(run_all: ModuleType) -> None:
    names = [path.name for path in run_all.discover(RUN_ALL.parent)]
    assert "run_all.py" not in names
    assert not [name for name in names if name.startswith("_")]
    assert "overhead.py" in names


def test_markdown_table_and_its_ratio_column(run_all: ModuleType) -> None:
    text = "# Adam step\n| size | ms | ratio |\n|---|---:|---:|\n| 1M | 1.0 | 1.50x |\n"
    (table,) = run_all.parse_tables(text)
    assert (table.title, table.header, table.rows) == (
        "Adam step",
        ["size", "ms", "ratio"],
        [["1M", "1.0", "1.50x"]],
    )
    assert table.ratio_columns() == [2]


def test_aligned_columns_with_two_ratio_columns_are_told_apart(run_all: ModuleType) -> None:
    (table,) = run_all.parse_tables(textwrap.dedent(ALIGNED_BENCH).replace('print("', ""))
    assert table.rows[0][0] == "device_count()"
    assert table.ratio_columns() == [3, 5]
    labels = [table.column_label(index) for index in table.ratio_columns()]
    assert labels == ["ratio (raw ns)", "ratio (deepspeed ns)"]


def test_a_table_without_ratios_is_kept_but_not_plotted(run_all: ModuleType) -> None:
    (table,) = run_all.parse_tables("| kernel | GB/s |\n|---|---|\n| copy | 10.5 |\n")
    assert table.rows == [["copy", "10.5"]] and table.ratio_columns() == []


def test_ratio_values(run_all: ModuleType) -> None:
    assert run_all.ratio_value(" 1.25x ") == 1.25
    assert run_all.ratio_value("0.4") == 0.4
    assert run_all.ratio_value("-") is None


def test_report_runs_everything_with_limits_and_says_what_failed(
    run_all: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = tmp_path / "bench"
    bench.mkdir()
    write(bench, "adam.py", MARKDOWN_BENCH)
    write(bench, "overhead.py", ALIGNED_BENCH)
    write(bench, "broken.py", 'import sys\nprint("starting")\nsys.exit("no device here")\n')
    write(bench, "hangs.py", "import time\ntime.sleep(60)\n")
    write(bench, "_helper.py", "raise SystemExit('a helper is never run')\n")
    out = tmp_path / "report"
    code = run_all.main(["--quick", "--timeout", "5", "--bench-dir", str(bench), "--out", str(out)])
    assert code == 1  # one failed and one timed out
    report = (out / "index.md").read_text()
    assert "| adam | ok |" in report and "| overhead | ok |" in report
    assert "| broken | failed (exit 1) |" in report and "no device here" in report
    assert "| hangs | timed out after 5 s |" in report
    assert "_helper" not in report
    assert "2.00x" in report  # --quick was passed to the script that accepts it
    assert "python benchmarks/run_all.py --quick --timeout 5 --out" in report
    assert "--bench-dir" not in report
    assert "- torch " in report and "CPUs" in report


@pytest.mark.extras
def test_plots_are_written_for_tables_with_ratios(run_all: ModuleType, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    bench = tmp_path / "bench"
    bench.mkdir()
    write(bench, "overhead.py", ALIGNED_BENCH)
    out = tmp_path / "report"
    assert run_all.main(["--bench-dir", str(bench), "--out", str(out)]) == 0
    (image,) = out.glob("*.png")
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"]({image.name})" in (out / "index.md").read_text()


def test_an_unknown_benchmark_name_is_an_error_listing_the_known(
    run_all: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_all.main(["--only", "nope", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "no benchmark named nope; known:" in capsys.readouterr().err


def test_aligned_columns_headed_speed_up_are_ratios(run_all: ModuleType) -> None:
    text = "  size    gloo us  anyaccel us  speed-up\n 4 KiB     3399.4        252.7    13.45x\n"
    (table,) = run_all.parse_tables(text)
    assert table.rows == [["4 KiB", "3399.4", "252.7", "13.45x"]]
    assert table.ratio_columns() == [3]
