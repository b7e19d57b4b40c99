"""The conformance kit passes in full on the emulated backend, device checks included."""

from __future__ import annotations

import pytest

from anyaccel.testing.conformance import CHECKS
from anyaccel.testing.isolation import run_isolated


@pytest.mark.parametrize("spec", ["emu:2", "npu:2:1GiB"])
def test_every_check_passes_and_none_is_skipped(monkeypatch: pytest.MonkeyPatch, spec: str) -> None:
    monkeypatch.setenv("ANYACCEL_EMULATED", spec)
    report = run_isolated("anyaccel.backends.emulated:EmulatedAccelerator", timeout=300)
    assert {result.name for result in report.results} == set(CHECKS)
    assert [(r.name, r.status, r.messages) for r in report.results if r.status != "passed"] == []
