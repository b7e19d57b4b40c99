"""The guard around code anyaccel does not control: contain, time-limit, refuse re-entry."""

from __future__ import annotations

import threading
import time

import pytest

from anyaccel import guard
from anyaccel.errors import InvalidSettingError, ReentrantDetectionError


def test_a_value_comes_back_with_its_time() -> None:
    result = guard.run_guarded("test code", lambda: 42, 5)
    assert result.ok and result.value == 42 and result.problem() == ""
    assert 0 <= result.seconds < 5


@pytest.mark.parametrize(
    ("error", "said"),
    [(ValueError("bad"), "raised ValueError: bad"), (SystemExit(2), "called sys.exit(2)")],
)
def test_exceptions_and_exits_come_back_as_values(error: BaseException, said: str) -> None:
    def fail() -> None:
        raise error

    result = guard.run_guarded("test code", fail, 5)
    assert not result.ok and result.error is error
    assert result.problem().startswith(said)


def test_keyboard_interrupt_goes_on_up() -> None:
    def interrupt() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        guard.run_guarded("test code", interrupt, 5)


def test_overrunning_code_is_abandoned() -> None:
    release = threading.Event()
    result = guard.run_guarded("slow code", release.wait, 0.2)
    release.set()
    assert result.timed_out and not result.ok
    assert "did not return within 0.2 s (ANYACCEL_PROBE_TIMEOUT)" in result.problem()


def test_reentry_is_refused_inside_and_allowed_outside() -> None:
    def reenter() -> str:
        try:
            guard.refuse_reentry("get_accelerator")
        except ReentrantDetectionError as error:
            return str(error)
        return "allowed"

    result = guard.run_guarded("plugin 'x' (x-dist) probe", reenter, 5)
    assert "get_accelerator() was called while anyaccel detection runs" in str(result.value)
    assert "from plugin 'x' (x-dist) probe" in str(result.value)
    assert result.reentered == ("get_accelerator",) and not result.ok
    assert reenter() == "allowed"
    assert guard.guarded_code_running() is None


@pytest.mark.parametrize(
    ("value", "seconds"), [(None, 10.0), ("", 10.0), ("2.5", 2.5), ("inf", None)]
)
def test_probe_timeout_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str | None, seconds: float | None
) -> None:
    if value is None:
        monkeypatch.delenv("ANYACCEL_PROBE_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("ANYACCEL_PROBE_TIMEOUT", value)
    assert guard.probe_timeout() == seconds


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan"])
def test_a_bad_probe_timeout_names_the_value_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("ANYACCEL_PROBE_TIMEOUT", value)
    with pytest.raises(
        InvalidSettingError, match=f"ANYACCEL_PROBE_TIMEOUT={value!r} is not a positive"
    ):
        guard.probe_timeout()


def test_patient_work_does_not_count_against_the_time_limit() -> None:
    # a native build under a plugin's import: announced work, not a hang
    def builds() -> str:
        with guard.patience():
            time.sleep(0.6)
        return "built"

    result = guard.run_guarded("plugin import", builds, timeout=0.2)
    assert result.ok and result.value == "built"
    assert result.seconds >= 0.6


def test_the_clock_runs_again_after_patient_work() -> None:
    def builds_then_hangs() -> str:
        with guard.patience():
            time.sleep(0.3)
        time.sleep(5)
        return "late"

    result = guard.run_guarded("plugin import", builds_then_hangs, timeout=0.2)
    assert result.timed_out and 0.5 <= result.seconds < 3


def test_patience_outside_the_guard_does_nothing() -> None:
    with guard.patience():
        assert guard.guarded_code_running() is None
