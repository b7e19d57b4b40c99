"""The probe vocabulary: status words are string enums that still compare as strings."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle

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
    package_absent,
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


def test_records_are_frozen_compared_hashed_and_shown_by_value() -> None:
    outcome = ProbeOutcome.found("two boards", 2)
    assert outcome == ProbeOutcome("available", "two boards", 2)  # type: ignore[arg-type]
    assert outcome != ProbeOutcome.found("one board", 1)
    assert hash(outcome) == hash(ProbeOutcome.found("two boards", 2))
    assert repr(outcome) == (
        "ProbeOutcome(kind=<ProbeKind.AVAILABLE: 'available'>, reason='two boards', "
        "device_count=2, remedy='')"
    )
    with pytest.raises(dataclasses.FrozenInstanceError, match="'reason'"):
        outcome.reason = "changed"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del outcome.kind
    assert outcome.reason == "two boards"


def test_records_replace_and_convert_to_plain_data_as_a_dataclass_does() -> None:
    outcome = ProbeOutcome.broken("import failed", "reinstall")
    changed = outcome.replace(reason="still failing")
    assert (changed.reason, changed.remedy, outcome.reason) == (
        "still failing",
        "reinstall",
        "import failed",
    )
    with pytest.raises(TypeError, match="no field"):
        outcome.replace(colour="red")
    report = detection.DetectionReport(
        "cpu", "x.Cpu", HowChosen.DETECTED, None,
        probes=(detection.ProbeRecord("cpu (fallback)", "cpu", 1, ProbeKind.AVAILABLE,
                                      "here", Decision.SELECTED, 0.001, 1),),
    )  # fmt: skip
    data = report.to_dict()
    assert data["probes"][0]["decision"] == "selected" and isinstance(data["probes"], tuple)
    assert json.loads(json.dumps(data))["probes"][0]["candidate"] == "cpu (fallback)"


def test_records_survive_pickle_and_deepcopy() -> None:
    candidate = BackendCandidate("board", "board (x)", 5, "m:probe", "m:Board", origin="x")
    for copied in (pickle.loads(pickle.dumps(candidate)), copy.deepcopy(candidate)):
        assert copied == candidate and copied is not candidate


def test_package_absent_names_the_top_level_package_or_says_nothing() -> None:
    assert package_absent("json.decoder") is None
    assert package_absent("no_such_runtime_pkg.torch.hpu") == "no_such_runtime_pkg is not installed"
