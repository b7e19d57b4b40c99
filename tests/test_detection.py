"""Detection: the cascade, DS_ACCELERATOR, the trace, caching, threads, fork, set_accelerator."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import anyaccel
from anyaccel import detection
from anyaccel.backends.cpu import CpuAccelerator
from anyaccel.detection import BackendCandidate, ProbeOutcome
from anyaccel.errors import (
    AcceleratorUnavailableError,
    CpuFallbackWarning,
    InvalidAcceleratorError,
    UnknownAcceleratorError,
)
from anyaccel.testing.simulated import simulate_cpu_only_torch, simulate_cuda


class NamedCpu(CpuAccelerator):
    """A CPU accelerator under another name, to stand for test candidates."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name


@pytest.fixture
def candidates(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., list[str]]]:
    """Register throwaway candidates; returns a function that adds one and a probe log."""
    added: list[tuple[str, str]] = []
    log: list[str] = []

    def add(
        name: str,
        priority: int,
        outcome: ProbeOutcome | Exception,
        make: Callable[[], Any] | None = None,
    ) -> list[str]:
        def probe() -> ProbeOutcome:
            log.append(name)
            if isinstance(outcome, Exception):
                raise outcome
            return outcome

        path = f"{name} (test)"
        detection.register_backend(
            BackendCandidate(name, path, priority, probe, make or (lambda: NamedCpu(name)), "tests")
        )
        added.append((name, path))
        return log

    yield add
    for name, path in added:
        detection.unregister_backend(name, path)


# ---------------------------------------------------------------- the default cascade
def test_cpu_only_machine_falls_back_to_cpu_with_a_warning() -> None:
    with (
        simulate_cpu_only_torch(),
        pytest.warns(CpuFallbackWarning, match="DS_ACCELERATOR") as record,
    ):
        acc = anyaccel.get_accelerator()
    assert acc._name == "cpu"
    assert "anyaccel report" in str(record[0].message)  # where the details are
    report = anyaccel.detection_report()
    names = [p.name for p in report.probes]
    assert names[-1] == "cpu" and report.probes[-1].decision == "selected"
    assert names.index("cuda") < names.index("cpu")
    cuda = report.probes[names.index("cuda")]
    assert cuda.kind == "not_installed" and cuda.decision == "passed over"
    assert all(p.decision == "passed over" for p in report.probes[:-1])


def test_simulated_gpu_is_selected_without_initialising_it(
    recwarn: pytest.WarningsRecorder,
) -> None:
    with simulate_cuda(device_count=4) as sim:
        acc = anyaccel.get_accelerator()
        assert acc._name == "cuda"
        assert sim.initialized is False
    assert not [w for w in recwarn if issubclass(w.category, CpuFallbackWarning)]
    report = anyaccel.detection_report()
    selected = next(p for p in report.probes if p.decision == "selected")
    assert (selected.name, selected.device_count) == ("cuda", 4)
    assert report.probes[-1].decision == "not probed"


def test_first_available_candidate_wins_and_later_ones_are_not_probed(
    candidates: Callable[..., list[str]],
) -> None:
    candidates("late", 30, ProbeOutcome.found("here", 1))
    candidates("early", 10, ProbeOutcome.no_device("none", "plug one in"))
    log = candidates("middle", 20, ProbeOutcome.found("here", 2))
    acc, report = detection.detect_accelerator()
    assert acc._name == "middle"
    assert log == ["early", "middle"]
    decisions = {p.name: p.decision for p in report.probes}
    assert decisions["early"] == "passed over"
    assert decisions["middle"] == "selected"
    assert decisions["late"] == "not probed"


def test_probe_all_probes_every_candidate(candidates: Callable[..., list[str]]) -> None:
    candidates("one", 10, ProbeOutcome.found("here", 1))
    log = candidates("two", 20, ProbeOutcome.found("here", 1))
    acc, report = detection.detect_accelerator(probe_all=True)
    assert acc._name == "one"
    assert log == ["one", "two"]
    assert {p.name: p.decision for p in report.probes}["two"] == "available, lower priority"


def test_a_probe_that_raises_is_passed_over(candidates: Callable[..., list[str]]) -> None:
    candidates("crashy", 10, RuntimeError("driver exploded"))
    acc, report = detection.detect_accelerator()
    assert acc._name == "cpu"
    crashy = next(p for p in report.probes if p.name == "crashy")
    assert crashy.kind == "broken"
    assert "driver exploded" in crashy.reason


def test_a_candidate_that_fails_to_instantiate_is_passed_over(
    candidates: Callable[..., list[str]],
) -> None:
    def refuse() -> Any:
        raise OSError("libfoo.so missing")

    candidates("flaky", 10, ProbeOutcome.found("here", 1), refuse)
    acc, report = detection.detect_accelerator()
    assert acc._name == "cpu"
    flaky = next(p for p in report.probes if p.name == "flaky")
    assert flaky.kind == "broken" and "libfoo.so missing" in flaky.reason


def test_probe_records_are_timed_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with simulate_cpu_only_torch(), caplog.at_level(logging.DEBUG, logger="anyaccel.detection"):
        _, report = detection.detect_accelerator()
    assert all(p.seconds >= 0 for p in report.probes)
    assert report.seconds >= sum(p.seconds for p in report.probes)
    assert "probe cuda (torch CUDA/ROCm build): not_installed" in caplog.text
    assert "selected accelerator 'cpu'" in caplog.text


def test_report_formats_and_serialises() -> None:
    with simulate_cpu_only_torch():
        _, report = detection.detect_accelerator()
    text = report.format()
    assert "accelerator: cpu" in text and "CPU-only build" in text and "-> selected" in text
    data = json.loads(json.dumps(report.to_dict()))
    assert data["accelerator"] == "cpu"
    assert "cuda" in [probe["name"] for probe in data["probes"]]


# ---------------------------------------------------------------- DS_ACCELERATOR
def test_forced_cpu_skips_other_probes_and_warns_nothing(
    monkeypatch: pytest.MonkeyPatch, recwarn: pytest.WarningsRecorder
) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", " CPU ")
    with simulate_cuda(device_count=1) as sim:
        acc = anyaccel.get_accelerator()
        assert sim.calls == []
    assert acc._name == "cpu"
    report = anyaccel.detection_report()
    assert report.how == "DS_ACCELERATOR" and report.forced_name == "cpu"
    assert [p.name for p in report.probes] == ["cpu"]
    assert not [w for w in recwarn if issubclass(w.category, CpuFallbackWarning)]


def test_forced_cuda_with_simulated_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "cuda")
    with simulate_cuda(device_count=1):
        assert anyaccel.get_accelerator()._name == "cuda"


def test_unknown_name_lists_the_valid_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "tpu9000")
    with pytest.raises(UnknownAcceleratorError) as info:
        anyaccel.get_accelerator()
    message = str(info.value)
    assert "DS_ACCELERATOR='tpu9000'" in message
    for name in anyaccel.SUPPORTED_ACCELERATOR_LIST:
        assert name in message
    assert isinstance(info.value, ValueError)


def test_a_module_path_is_never_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "this")
    sys.modules.pop("this", None)
    with pytest.raises(UnknownAcceleratorError):
        anyaccel.get_accelerator()
    assert "this" not in sys.modules


def test_forced_cuda_on_cpu_only_torch_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "cuda")
    with simulate_cpu_only_torch(), pytest.raises(AcceleratorUnavailableError) as info:
        anyaccel.get_accelerator()
    assert info.value.kind == "not_installed"
    assert "CPU-only build" in str(info.value)
    assert "Install a CUDA" in str(info.value)
    assert "unset DS_ACCELERATOR" in str(info.value)


def test_forced_cuda_without_a_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "cuda")
    with simulate_cuda(device_count=0), pytest.raises(AcceleratorUnavailableError) as info:
        anyaccel.get_accelerator()
    assert info.value.kind == "no_device"
    assert "nvidia-smi" in str(info.value)


def test_forced_broken_backend_says_broken(
    monkeypatch: pytest.MonkeyPatch, candidates: Callable[..., list[str]]
) -> None:
    candidates("brittle", 10, ProbeOutcome.broken("import raised OSError: libx.so", "Fix it."))
    monkeypatch.setenv("DS_ACCELERATOR", "brittle")
    with pytest.raises(
        AcceleratorUnavailableError, match=r"installed but broken.*libx\.so"
    ) as info:
        anyaccel.get_accelerator()
    assert info.value.kind == "broken"


def test_failed_detection_is_not_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "nope")
    with pytest.raises(UnknownAcceleratorError):
        anyaccel.get_accelerator()
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    assert anyaccel.get_accelerator()._name == "cpu"


def test_supported_list_follows_the_registry(candidates: Callable[..., list[str]]) -> None:
    assert anyaccel.SUPPORTED_ACCELERATOR_LIST.index("cuda") < (
        anyaccel.SUPPORTED_ACCELERATOR_LIST.index("cpu")
    )
    candidates("newhw", 15, ProbeOutcome.found("here", 1))
    assert "newhw" in anyaccel.SUPPORTED_ACCELERATOR_LIST


# ---------------------------------------------------------------- caching, threads, fork
def test_get_accelerator_is_cached_until_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    first = anyaccel.get_accelerator()
    assert anyaccel.get_accelerator() is first
    anyaccel.reset_accelerator()
    assert anyaccel.get_accelerator() is not first


def test_32_threads_racing_get_one_instance(candidates: Callable[..., list[str]]) -> None:
    def slow_make() -> Any:
        time.sleep(0.05)  # widen the window for a race
        return NamedCpu("racer")

    log = candidates("racer", 1, ProbeOutcome.found("here", 1), slow_make)
    barrier = threading.Barrier(32)
    results: list[object] = []

    def worker() -> None:
        barrier.wait()
        results.append(anyaccel.get_accelerator())

    threads = [threading.Thread(target=worker) for _ in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 32
    assert len({id(r) for r in results}) == 1
    assert log == ["racer"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_uses_the_parents_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    parent = anyaccel.get_accelerator()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: must not detect again, and the accelerator must work
        try:
            os.environ["DS_ACCELERATOR"] = "no-such-backend"  # would fail if detection re-ran
            child = anyaccel.get_accelerator()
            child.manual_seed(3)
            value = float(child.FloatTensor([1.5, 2.5]).sum())
            message = f"{id(child) == id(parent)} {child._name} {value}"
        except BaseException as error:  # report anything to the parent
            message = f"error {error!r}"
        os.write(write_end, message.encode())
        os._exit(0)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    answer = os.read(read_end, 1000).decode()
    os.close(read_end)
    assert status == 0
    assert answer == "True cpu 4.0"


# ---------------------------------------------------------------- set_accelerator
def test_set_accelerator_replaces_the_choice() -> None:
    mine = NamedCpu("mine")
    anyaccel.set_accelerator(mine)
    assert anyaccel.get_accelerator() is mine
    assert anyaccel.detection_report().how == "set_accelerator"
    assert anyaccel.is_current_accelerator_supported() is False


def test_is_current_accelerator_supported_for_builtin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    assert anyaccel.is_current_accelerator_supported() is True


def test_set_accelerator_with_a_wrong_object_names_what_is_missing() -> None:
    class NotAnAccelerator:
        _name = "bogus"

        def device_count(self) -> int:
            return 1

    with pytest.raises(TypeError) as info:
        anyaccel.set_accelerator(NotAnAccelerator())
    message = str(info.value)
    assert isinstance(info.value, InvalidAcceleratorError)
    assert "NotAnAccelerator" in message
    assert "set_device" in message and "memory_allocated" in message
    assert "device_count," not in message  # it has that one
    assert "Subclass anyaccel.Accelerator" in message


def test_set_accelerator_with_a_class_asks_for_an_instance() -> None:
    with pytest.raises(TypeError, match=r"call it: set_accelerator\(CpuAccelerator\(\)\)"):
        anyaccel.set_accelerator(CpuAccelerator)


def test_set_accelerator_needs_a_name() -> None:
    nameless = CpuAccelerator()
    nameless._name = ""
    with pytest.raises(TypeError, match="_name is ''"):
        anyaccel.set_accelerator(nameless)


def test_a_deepspeed_style_accelerator_is_accepted_without_subclassing() -> None:
    members = {
        name: getattr(CpuAccelerator, name)
        for name in detection.REQUIRED_MEMBERS
        if name != "_name" and hasattr(CpuAccelerator, name)
    }
    members["__init__"] = CpuAccelerator.__init__
    members["_name"] = "foreign"
    foreign_class = type("ForeignAccelerator", (), members)
    foreign = foreign_class()
    assert not hasattr(foreign, "pin_empty")
    anyaccel.set_accelerator(foreign)
    acc = anyaccel.get_accelerator()
    assert acc is foreign
    assert isinstance(acc, anyaccel.Accelerator)
    assert acc.pin_empty(3, dtype=torch.float32).shape == (3,)  # bound from the defaults
    assert acc.is_fp64_supported() is True


@pytest.mark.parametrize(
    ("launcher_env", "warns"),
    [
        ({}, True),
        ({"RANK": "0", "LOCAL_RANK": "0"}, True),
        ({"RANK": "3", "LOCAL_RANK": "0"}, False),  # another node's first process
        ({"LOCAL_RANK": "1"}, False),
        ({"OMPI_COMM_WORLD_RANK": "2"}, False),
        ({"SLURM_PROCID": "0"}, True),
    ],
)
def test_cpu_fallback_warns_once_per_job_from_rank_0(
    monkeypatch: pytest.MonkeyPatch, launcher_env: dict[str, str], warns: bool
) -> None:
    for name in ("RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in launcher_env.items():
        monkeypatch.setenv(name, value)
    with simulate_cpu_only_torch(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert anyaccel.get_accelerator()._name == "cpu"
    fallbacks = [w for w in caught if issubclass(w.category, CpuFallbackWarning)]
    assert len(fallbacks) == int(warns)
    if warns:
        message = str(fallbacks[0].message)
        assert "\n" not in message and len(message) < 200  # short: one line
        assert "uses the CPU" in message and "DS_ACCELERATOR=cpu" in message
        assert "anyaccel report" in message


def test_cpu_fallback_warning_names_the_users_line_whichever_helper_asked_first(
    tmp_path: Path,
) -> None:
    script = tmp_path / "user_script.py"
    script.write_text(
        "import warnings\n"
        "warnings.simplefilter('always')\n"
        "from anyaccel.distributed import ddp_device_ids\n"
        "ids = ddp_device_ids(0)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "RANK", "LOCAL_RANK")}
    env["PYTHONPATH"] = str(Path(anyaccel.__file__).parents[1])
    code = (
        "from anyaccel.testing.simulated import simulate_cpu_only_torch\n"
        "import runpy\n"
        "with simulate_cpu_only_torch():\n"
        f"    runpy.run_path({str(script)!r}, run_name='__main__')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"{script}:4: CpuFallbackWarning" in result.stderr, result.stderr[-2000:]


def test_a_candidate_that_compiles_on_first_use_gets_its_own_creation_time() -> None:
    """The emulated device's constructor may build C++ for minutes: the probe's seconds are not
    its limit (DS_ACCELERATOR=emulated failed on a busy host after 10 s)."""
    import time

    from anyaccel import detection
    from anyaccel.backends.cpu import CpuAccelerator
    from anyaccel.probe import BackendCandidate, ProbeOutcome
    from anyaccel.registry import BUILTIN_CANDIDATES

    def slow() -> CpuAccelerator:
        time.sleep(0.5)
        return CpuAccelerator()

    found = ProbeOutcome.found("here", 1)
    plain = BackendCandidate("cpu", "slow cpu", 999, lambda: found, slow)
    patient = BackendCandidate("cpu", "slow cpu", 999, lambda: found, slow, creation_seconds=30)
    assert isinstance(detection._instantiate(plain, found, 0.1), ProbeOutcome)
    assert isinstance(detection._instantiate(patient, found, 0.1), CpuAccelerator)
    emulated = next(c for c in BUILTIN_CANDIDATES if c.name == "emulated")
    assert emulated.creation_seconds is not None and emulated.creation_seconds >= 600
