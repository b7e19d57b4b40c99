"""The public functions are safe against each other, in any threads at once."""

from __future__ import annotations

import random
import sys
import threading
import time

import pytest

import anyaccel
from anyaccel.backends.cpu import CpuAccelerator

pytestmark = pytest.mark.filterwarnings("ignore::anyaccel.errors.CpuFallbackWarning")


class Named(CpuAccelerator):
    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name


def test_mixed_calls_from_many_threads_never_fail_or_tear() -> None:
    """16 threads for 3 s: get, report, set, reset in random order; every answer consistent."""
    candidates = [Named(f"set-{i}") for i in range(4)]
    problems: list[str] = []
    counts = {"get": 0, "report": 0, "set": 0, "reset": 0}
    stop = time.monotonic() + 3.0

    def check_report() -> None:
        report = anyaccel.detection_report()
        if report.how == "set_accelerator":
            ok = report.accelerator.startswith("set-") and report.probes == ()
        else:
            ok = report.how == "detected" and report.accelerator == "cpu" and bool(report.probes)
        if not ok:
            problems.append(f"torn report: {report.how} {report.accelerator}")

    def work(seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < stop:
            action = rng.choice(("get", "get", "report", "report", "set", "reset"))
            try:
                if action == "get":
                    accelerator = anyaccel.get_accelerator()
                    if accelerator._name != "cpu" and not accelerator._name.startswith("set-"):
                        problems.append(f"odd accelerator {accelerator!r}")
                elif action == "report":
                    check_report()
                elif action == "set":
                    anyaccel.set_accelerator(rng.choice(candidates))
                else:
                    anyaccel.reset_accelerator()
            except BaseException as error:  # an AssertionError here is the old bug
                problems.append(f"{action}: {type(error).__name__}: {error}")
            counts[action] += 1

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(16)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        sys.setswitchinterval(interval)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    assert problems == []
    assert all(count > 0 for count in counts.values()), counts


def test_threads_waiting_on_one_detection_share_its_report() -> None:
    reports: list[object] = []
    accelerators: list[object] = []
    barrier = threading.Barrier(12)

    def ask() -> None:
        barrier.wait()
        accelerators.append(anyaccel.get_accelerator())
        reports.append(anyaccel.detection_report())

    threads = [threading.Thread(target=ask) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len({id(a) for a in accelerators}) == 1
    assert len({id(r) for r in reports}) == 1
