"""The conformance kit: every built-in backend passes it, a broken accelerator fails it clearly."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch

from anyaccel import detection
from anyaccel.backends.cpu import CpuAccelerator
from anyaccel.backends.generic import GenericAccelerator
from anyaccel.testing import simulated
from anyaccel.testing.conformance import (
    CHECKS,
    ConformanceError,
    ConformanceReport,
    prepare,
    run_conformance,
)

pytestmark = pytest.mark.filterwarnings("ignore::anyaccel.errors.CpuFallbackWarning")

pytest_plugins = ["pytester"]


def _failures(report: ConformanceReport) -> dict[str, tuple[str, ...]]:
    return {r.name: r.messages for r in report.failures}


def _simulations() -> list[str]:
    """Every ``simulate_*`` runtime that takes no required argument (new ones join by name)."""
    names = []
    for name, factory in vars(simulated).items():
        if not name.startswith("simulate_") or not callable(factory):
            continue
        required = [
            p
            for p in inspect.signature(factory).parameters.values()
            if p.default is inspect.Parameter.empty
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        if not required:
            names.append(name.removeprefix("simulate_"))
    return sorted(names)


# ---------------------------------------------------------------- built-in backends pass
def test_cpu_backend_passes_for_real() -> None:
    report = run_conformance(CpuAccelerator)
    assert report.passed, report.format()
    assert [r.status for r in report.results] == ["passed"] * len(CHECKS)


def _needs_privateuse1(name: str) -> bool:
    """Whether ``name`` is no device type torch knows, so its runtime renames PrivateUse1."""
    try:
        torch.device(name)
    except RuntimeError:
        return True
    return False


_IN_SUBPROCESS = [c for c in CHECKS if c != "compile_backend"]  # spare the torch._dynamo import

_RUN_SIMULATED = f"""
import json, os, sys, warnings
import torch
warnings.simplefilter("ignore")
simulation, name = sys.argv[1], sys.argv[2]
torch.utils.rename_privateuse1_backend(name)  # as the vendor runtime does on import
from anyaccel import detection
from anyaccel.testing import simulated
import torch.utils.cpp_extension
from anyaccel.testing.conformance import run_conformance
os.environ["DS_ACCELERATOR"] = name
with getattr(simulated, "simulate_" + simulation)():
    accelerator, _ = detection.detect_accelerator()
    report = run_conformance(accelerator, {_IN_SUBPROCESS!r})
print(json.dumps({{"passed": report.passed, "text": report.format()}}))
"""


@pytest.fixture(scope="module")
def privateuse1_reports() -> dict[str, subprocess.Popen[str]]:
    """A fresh process per PrivateUse1 runtime (the rename is once per process), all at once."""
    names = {c.name for c in detection.registered_backends()}
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    return {
        name: subprocess.Popen(
            [sys.executable, "-c", _RUN_SIMULATED, name, name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name in _simulations()
        if name in names and _needs_privateuse1(name)
    }


#: Gaps the kit found in vendor backends still landing; remove an entry once it passes.
KNOWN_GAPS: dict[str, str] = {}


@pytest.mark.parametrize(
    "simulation",
    [
        pytest.param(n, marks=pytest.mark.xfail(reason=KNOWN_GAPS[n], strict=True))
        if n in KNOWN_GAPS
        else n
        for n in _simulations()
    ],
)
def test_simulated_backend_passes(
    simulation: str,
    privateuse1_reports: dict[str, subprocess.Popen[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = simulation.replace("_", ".")
    if name not in [c.name for c in detection.registered_backends()]:
        pytest.skip(f"simulate_{simulation} stands for a failure mode, not a backend name")
    prepare()
    monkeypatch.setenv("DS_ACCELERATOR", name)
    in_process = ["compile_backend"] if name in privateuse1_reports else None
    with getattr(simulated, f"simulate_{simulation}")():
        accelerator, _ = detection.detect_accelerator()
        report = run_conformance(accelerator, in_process)
    assert report.passed, report.format()
    assert accelerator._name == name.split(".")[0]
    if name in privateuse1_reports:
        process = privateuse1_reports[name]
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-3000:]
        result = json.loads(out.strip().splitlines()[-1])
        assert result["passed"], result["text"]


def test_simulated_cuda_passes_in_process() -> None:
    prepare()
    with simulated.simulate_cuda(device_count=2):
        from anyaccel.backends.cuda import CudaAccelerator

        report = run_conformance(CudaAccelerator)
    assert report.passed, report.format()


def test_simulated_cuda_is_among_the_checked_runtimes() -> None:
    assert "cuda" in _simulations()


def test_generic_backend_passes_over_a_torch_cuda_shaped_module() -> None:
    prepare()
    with simulated.simulate_cuda(device_count=2):
        report = run_conformance(lambda: GenericAccelerator("cuda", torch.cuda))
    assert report.passed, report.format()


# ---------------------------------------------------------------- a broken accelerator fails
class BrokenAccelerator(CpuAccelerator):
    """A CPU accelerator with one classic mistake per contract area."""

    _name = "cpu"

    def current_device(self) -> Any:
        return torch.device("cpu", 0)  # a device where the contract wants an int index

    def device_name(self, device_index: int | None = None) -> str:
        return "cpu:x" if device_index is not None else "cpu"

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        return 0  # a peak below the current figure

    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        pass  # forgets to restore

    def set_visible_devices_envs(self, current_env: dict[str, str], ids: Any) -> None:
        current_env["CUDA_VISIBLE_DEVICES"] = " ".join(str(i) for i in ids)

    def set_compile_backend(self, backend: str) -> None:
        self._compile_backend = backend  # accepts anything

    def get_op_builder(self, class_name: str) -> Any:
        raise KeyError(class_name)

    @property
    def LongTensor(self) -> Callable[..., torch.Tensor]:
        return lambda data: torch.tensor(data, dtype=torch.int32)


@pytest.fixture(scope="module")
def broken_report() -> ConformanceReport:
    return run_conformance(BrokenAccelerator)


def test_broken_accelerator_fails(broken_report: ConformanceReport) -> None:
    assert not broken_report.passed
    assert set(_failures(broken_report)) == {
        "return_types", "device_strings", "rng_state", "memory", "tensor_types",
        "visible_devices", "compile_backend", "op_builders",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("check", "message"),
    [
        ("return_types", "current_device() returned device device(type='cpu', index=0); want int"),
        ("device_strings", "torch.device('cpu:x') raised RuntimeError"),
        ("rng_state", "get_rng_state() after set_rng_state(saved) differs from the saved"),
        ("memory", "max_memory_allocated() = 0 is below memory_allocated()"),
        ("tensor_types", "LongTensor([1, 2]) has torch.int32; want torch.int64"),
        ("visible_devices", "wrote CUDA_VISIBLE_DEVICES='0 2'; want '0,2'"),
        ("compile_backend", "set_compile_backend('no-such-compile-backend') was accepted"),
        ("op_builders", "get_op_builder('NoSuchOpBuilder') raised KeyError"),
    ],
)
def test_broken_accelerator_fails_with_the_right_message(
    broken_report: ConformanceReport, check: str, message: str
) -> None:
    messages = _failures(broken_report)[check]
    assert any(message in m for m in messages), messages


def test_report_text_names_each_failure(broken_report: ConformanceReport) -> None:
    text = broken_report.format()
    assert "FAILED  memory" in text
    assert "- max_memory_allocated() = 0 is below" in text
    assert text.splitlines()[-1] == "2 passed, 8 failed, 0 skipped"
    assert broken_report.to_dict()["passed"] is False


def test_object_missing_members_fails_the_contract_check() -> None:
    class Half:
        _name = "half"

    report = run_conformance(Half, checks=["contract_members"])
    assert "missing members: is_synchronized_device" in report.failures[0].messages[0]


def test_check_that_cannot_run_is_skipped_with_the_reason() -> None:
    prepare()
    with simulated.simulate_cuda():
        from anyaccel.backends.cuda import CudaAccelerator

        report = run_conformance(CudaAccelerator, checks=["tensor_types"])
    assert report.results[0].status == "skipped"
    assert "torch cannot allocate on 'cuda'" in report.results[0].messages[0]
    assert report.passed


# ---------------------------------------------------------------- loading targets
@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("anyaccel.backends.cpu", "not of the form 'package.module:Class'"),
        ("no_such_module_xyz:Acc", "cannot import 'no_such_module_xyz'"),
        ("anyaccel.backends.cpu:Nope", "has no attribute 'Nope'"),
    ],
)
def test_bad_targets_are_reported(target: str, message: str) -> None:
    with pytest.raises(ConformanceError, match=message):
        run_conformance(target)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("os:sep", f"os:sep is {os.sep!r} (type str), not an accelerator"),
        ("collections:OrderedDict", "collections:OrderedDict() returned OrderedDict() (type"),
        (3, "3 is 3 (type int), not an accelerator"),
    ],
)
def test_a_target_with_none_of_the_contracts_members_is_refused_once(
    target: object, message: str
) -> None:
    with pytest.raises(ConformanceError) as refused:
        run_conformance(target)
    assert message in str(refused.value)
    assert "anyaccel.Accelerator subclass" in str(refused.value)


def test_unknown_check_names_the_valid_ones() -> None:
    with pytest.raises(ConformanceError, match="choose from contract_members"):
        run_conformance(CpuAccelerator, checks=["speed"])


def test_accelerator_that_cannot_be_created_is_reported() -> None:
    class NeedsHardware(CpuAccelerator):
        def __init__(self) -> None:
            raise OSError("no /dev/acme0")

    with pytest.raises(ConformanceError, match="no /dev/acme0"):
        run_conformance(NeedsHardware)


# ---------------------------------------------------------------- the pytest plugin
def test_pytest_plugin_runs_one_test_per_check(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("from anyaccel.testing.pytest_plugin import anyaccel_conformance\n")
    pytester.makepyfile(
        test_vendor="""
        from anyaccel.backends.cpu import CpuAccelerator
        from anyaccel.testing.pytest_plugin import conformance_tests

        class LowPeak(CpuAccelerator):
            def max_memory_allocated(self, device_index=None):
                return 0

        test_cpu = conformance_tests("anyaccel.backends.cpu:CpuAccelerator")
        test_broken = conformance_tests(LowPeak, checks=["memory"])

        def test_fixture(anyaccel_conformance):
            anyaccel_conformance("anyaccel.backends.cpu:CpuAccelerator")
        """
    )
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=len(CHECKS) + 1, failed=1)
    result.stdout.fnmatch_lines(["*memory:*", "*max_memory_allocated() = 0 is below*"])


def test_a_skip_reason_is_never_cut_short(monkeypatch: pytest.MonkeyPatch) -> None:
    words = "Could not run 'aten::empty.memory_format' with arguments from the 'PrivateUse1' "
    message = words + "backend. This could be because the operator doesn't exist for this backend"

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(message + "\nthe dispatcher's long table follows")

    monkeypatch.setattr(torch, "empty", refuse)
    report = run_conformance(CpuAccelerator, checks=["tensor_types"])
    reason = report.results[0].messages[0]
    assert report.results[0].status == "skipped"
    assert f"(NotImplementedError: {message}); a simulated runtime" in reason, reason


def test_zero_devices_is_said_first_and_the_device_checks_are_skipped() -> None:
    prepare(compile_backend=False)
    with simulated.simulate_npu(device_count=0):
        from anyaccel.backends.npu import NpuAccelerator

        report = run_conformance(NpuAccelerator, checks=["contract_members", "rng_state"])
    statuses = {r.name: r.status for r in report.results}
    assert statuses == {"contract_members": "passed", "rng_state": "skipped"}
    assert report.no_device is not None and "device_count() is 0" in report.no_device
    assert report.format().splitlines()[1].startswith("NO DEVICE: no device was exercised")
    assert report.to_dict()["no_device"] == report.no_device
