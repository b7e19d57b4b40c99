"""The probe vocabulary: status words are string enums that still compare as strings."""

from __future__ import annotations

import json

import pytest

from anyaccel import detection
from anyaccel.probe import (
    BackendCandidate,
    Decision,
    HowChosen,
    PluginState,
    ProbeKind,
    ProbeOutcome,
    forced_name,
    package_installed,
)


@pytest.mark.parametrize("word", [*ProbeKind, *Decision, *HowChosen, *PluginState])
def test_status_words_compare_format_and_serialise_as_their_string(word: ProbeKind) -> None:
    assert word == word.value
    assert str(word) == word.value
    assert f"{word}" == word.value and f"{word:>30}".strip() == word.value
    assert json.dumps(word) == json.dumps(word.value)


def test_outcome_constructors_set_the_kind() -> None:
    assert ProbeOutcome.found("x", 2).kind is ProbeKind.AVAILABLE
    assert ProbeOutcome.found("x", 2).available
    assert ProbeOutcome.not_installed("x", "y").kind == "not_installed"
    assert ProbeOutcome.broken("x", "y").kind is ProbeKind.BROKEN
    assert not ProbeOutcome.no_device("x", "y").available


def test_outcome_accepts_a_plain_string_kind_and_refuses_an_unknown_one() -> None:
    assert ProbeOutcome("no_device", "none here").kind is ProbeKind.NO_DEVICE  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'maybe'"):
        ProbeOutcome("maybe", "?")  # type: ignore[arg-type]


def test_candidate_knows_whether_it_is_builtin() -> None:
    assert BackendCandidate("a", "a", 1, "m:p", "m:C").is_builtin
    assert not BackendCandidate("a", "a", 1, "m:p", "m:C", origin="acme-accel").is_builtin


def test_forced_name_is_normalised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "  CUDA ")
    assert forced_name() == "cuda"
    monkeypatch.setenv("DS_ACCELERATOR", "  ")
    assert forced_name() is None


def test_package_installed_does_not_import() -> None:
    assert package_installed("json")
    assert not package_installed("no_such_package_anyaccel")
    assert not package_installed("")


def test_detection_reexports_the_vocabulary() -> None:
    assert detection.ProbeOutcome is ProbeOutcome
    assert detection.BackendCandidate is BackendCandidate
    assert detection.package_installed is package_installed
    assert detection.forced_name is forced_name
