"""benchmarks/first_build.py: its jobs name real builders, and it prints one row per job."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from anyaccel.ops import registry

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "first_build.py"


def _load():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("first_build_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_job_names_builders_anyaccel_ops_can_build() -> None:
    bench = _load()
    host = registry.builder_package("cpu")
    for _, builders, _ in bench.JOBS:
        for name in builders:
            assert registry.buildable_builder_class(host, name, "cpu") is not None, name


def test_the_table_has_a_row_per_job_with_its_ratio_to_the_floor(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = _load()
    built: list[tuple[str, ...]] = []
    monkeypatch.setattr(bench, "floor_seconds", lambda: 10.0)
    monkeypatch.setattr(bench, "build_seconds", lambda names: built.append(names) or 25.0)
    assert bench.main([]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(bench.JOBS)
    assert built == [builders for _, builders, _ in bench.JOBS]
    assert all(" | 25.0 | 10.0 | 2.50x | " in row for row in rows[1:])
