"""The emulated backend's data sheet: chosen only when asked for, the vendor's comm backend."""

from __future__ import annotations

import pytest

from anyaccel.emulated.accelerator import (
    DEFAULT_COMMUNICATION_BACKEND,
    _communication_backend,
    probe,
    vendor_backend,
)
from anyaccel.probe import ProbeKind
from anyaccel.registry import SUPPORTED_ACCELERATOR_LIST


def test_the_probe_declines_unless_ds_accelerator_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYACCEL_EMULATED", "emu:4")
    outcome = probe()
    assert outcome.kind is ProbeKind.NO_DEVICE
    assert "DS_ACCELERATOR=emulated" in outcome.remedy


def test_the_probe_accepts_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "emulated")
    monkeypatch.setenv("ANYACCEL_EMULATED", "npu:4")
    outcome = probe()
    assert outcome.available and outcome.device_count == 4


@pytest.mark.parametrize(
    ("device_type", "backend"),
    [
        ("emu", DEFAULT_COMMUNICATION_BACKEND),
        ("zpu", "emuccl"),
        ("npu", "hccl"),
        ("mlu", "cncl"),
        ("sdaa", "tccl"),
        ("musa", "mccl"),
        ("supa", "bccl"),
        ("klxpu", "emuccl"),  # its data sheet says nccl, one of torch's own names
    ],
)
def test_collectives_backend_follows_the_vendor(device_type: str, backend: str) -> None:
    assert _communication_backend(device_type) == backend


def test_no_vendor_for_an_unknown_name() -> None:
    assert vendor_backend("emu") is None and vendor_backend("emulated") is None


def test_the_name_is_supported() -> None:
    assert "emulated" in SUPPORTED_ACCELERATOR_LIST
