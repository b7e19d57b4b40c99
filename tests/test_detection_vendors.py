"""Detection order across vendor backends: who wins when several are present, and why not."""

from __future__ import annotations

from typing import Any

import pytest

from anyaccel import detection
from anyaccel.detection import detect_accelerator
from anyaccel.errors import AcceleratorUnavailableError
from anyaccel.probe import resolve
from anyaccel.registry import BUILTIN_CANDIDATES
from anyaccel.testing.simulated import (
    simulate_cuda,
    simulate_hpu,
    simulate_mlu,
    simulate_mps,
    simulate_musa,
    simulate_npu,
    simulate_npu_without_cann,
    simulate_sdaa,
    simulate_supa,
    simulate_xpu,
)


def _row(report: object, name: str) -> object:
    return next(p for p in report.probes if p.name == name)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("first", "second", "winner"),
    [
        (lambda: simulate_xpu(path="ipex"), simulate_npu, "xpu"),
        (simulate_npu, simulate_sdaa, "npu"),
        (simulate_sdaa, simulate_mps, "sdaa"),
        (simulate_mps, simulate_hpu, "mps"),
        (simulate_hpu, simulate_mlu, "hpu"),
        (simulate_mlu, simulate_supa, "mlu"),
        (simulate_npu, simulate_cuda, "npu"),
    ],
    ids=["xpu>npu", "npu>sdaa", "sdaa>mps", "mps>hpu", "hpu>mlu", "mlu>supa", "npu>cuda"],
)
def test_the_earlier_vendor_in_the_contract_order_wins(first, second, winner) -> None:  # type: ignore[no-untyped-def]
    with first(), second():
        acc, _ = detect_accelerator()
    assert acc._name == winner


def test_supa_wins_over_the_cuda_it_impersonates() -> None:
    with simulate_supa(cuda_compat=True):
        acc, report = detect_accelerator(probe_all=True)
    assert acc._name == "supa"
    assert _row(report, "cuda").decision == "available, lower priority"  # type: ignore[attr-defined]


def test_musa_wins_over_a_cuda_compat_layer() -> None:
    with simulate_musa(cuda_compat=True):
        acc, _ = detect_accelerator()
    assert acc._name == "musa"


def test_installed_vendor_without_device_does_not_win() -> None:
    with simulate_npu(device_count=0), simulate_mlu(device_count=1):
        acc, report = detect_accelerator()
    assert acc._name == "mlu"
    npu = _row(report, "npu")
    assert npu.kind == "no_device" and npu.decision == "passed over"  # type: ignore[attr-defined]


def test_broken_vendor_import_falls_through_with_the_error_in_the_trace() -> None:
    with simulate_npu_without_cann(), simulate_hpu():
        acc, report = detect_accelerator()
    assert acc._name == "hpu"
    assert "libhccl.so" in _row(report, "npu").reason  # type: ignore[attr-defined]


def test_cuda_beats_native_xpu_but_not_ipex() -> None:
    with simulate_cuda(), simulate_xpu(path="native"):
        native_loses, _ = detect_accelerator()
    with simulate_cuda(), simulate_xpu(path="ipex"):
        ipex_wins, _ = detect_accelerator()
    assert native_loses._name == "cuda" and ipex_wins._name == "xpu"


@pytest.mark.parametrize(
    ("name", "kind"),
    [("mlu", "not_installed"), ("sdaa", "not_installed"), ("hpu", "not_installed")],
)
def test_forcing_a_missing_vendor_says_not_installed(
    monkeypatch: pytest.MonkeyPatch, name: str, kind: str
) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", name)
    with pytest.raises(AcceleratorUnavailableError) as raised:
        detect_accelerator()
    assert raised.value.kind == kind and "Install" in str(raised.value)


def test_forcing_a_vendor_without_devices_says_no_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "musa")
    with simulate_musa(device_count=0), pytest.raises(AcceleratorUnavailableError) as raised:
        detect_accelerator()
    assert raised.value.kind == "no_device"


def test_forcing_a_vendor_skips_earlier_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "sdaa")
    with simulate_npu(), simulate_sdaa():
        acc, report = detect_accelerator()
    assert acc._name == "sdaa" and [p.name for p in report.probes] == ["sdaa"]


def _guarded_labels(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The labels detection hands to the guard from now on."""
    labels: list[str] = []
    real = detection.run_guarded

    def recording(label: str, function: Any, timeout: float | None) -> Any:
        labels.append(label)
        return real(label, function, timeout)

    monkeypatch.setattr(detection, "run_guarded", recording)
    return labels


def test_a_vendor_runtime_that_is_plainly_absent_costs_no_guarded_probe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    labels = _guarded_labels(monkeypatch)
    _, report = detect_accelerator()
    absent = {
        row.path: resolve(row.accelerator).runtime_absent()
        for row in BUILTIN_CANDIDATES
        if hasattr(resolve(row.accelerator), "runtime_absent")
    }
    decided = {path: reason for path, reason in absent.items() if reason is not None}
    assert decided, "on any torch some vendor runtime is absent (torch_npu and torch_mlu at once)"
    for probe in report.probes:
        if probe.candidate in decided:
            assert (probe.kind, probe.reason) == ("not_installed", decided[probe.candidate])
    assert not [label for label in labels if any(path in label for path in decided)]


def test_an_installed_runtime_is_still_probed_behind_the_guard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    labels = _guarded_labels(monkeypatch)
    with simulate_mlu(device_count=0):
        _, report = detect_accelerator()
    assert "the mlu (torch_mlu) probe" in labels
    assert _row(report, "mlu").kind == "no_device"  # type: ignore[attr-defined]


def test_absent_answers_match_what_each_probe_says() -> None:
    for row in BUILTIN_CANDIDATES:
        absent = getattr(resolve(row.accelerator), "runtime_absent", None)
        reason = absent() if absent is not None else None
        if reason is not None:
            outcome = resolve(row.probe)()
            assert (outcome.kind, outcome.reason) == ("not_installed", reason), row.path
