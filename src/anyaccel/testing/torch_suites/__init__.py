"""PyTorch's own device-generic test suites, run on a PrivateUse1 device: the emulated one or yours.

torch's wheel ships the machinery of its device-generic tests (``torch.testing._internal``:
``op_db``, ``module_db``, ``instantiate_device_type_tests`` and its ``PrivateUse1TestBase``) but
not its test files. This package builds suites from that machinery and runs them on whatever
device holds PrivateUse1 in this process:

- ``compare_cpu``: every OpInfo's reference inputs run on the device and on the CPU, results
  compared (the check of torch's ``test_ops.py::TestCommon::test_compare_cpu``), and every
  ModuleInfo's forward and backward likewise (``test_modules.py``'s CPU/GPU parity);
- ``openreg``: PyTorch's OpenReg test files, given a path to them, run against the device.

``python -m anyaccel.testing.torch_suites --help`` is the command. torch's machinery decides at
import which device bases exist, so the device is installed (or the vendor's module imported)
before anything of ``torch.testing._internal`` is: always in a fresh process.
"""

from __future__ import annotations

import importlib
import sys
import traceback
import unittest
from dataclasses import dataclass, field
from enum import Enum
from types import TracebackType
from typing import TypeAlias

from anyaccel.errors import AcceleratorError

__all__ = [
    "CaseResult",
    "Outcome",
    "SuiteError",
    "SuiteReport",
    "prepare_device",
    "run_tests",
]

_ExcInfo: TypeAlias = tuple[type[BaseException], BaseException, TracebackType | None]


class SuiteError(AcceleratorError):
    """A suite cannot run here: no PrivateUse1 device, or torch's test machinery came too early."""


class Outcome(str, Enum):
    """How one test ended."""

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    SKIPPED = "skipped"
    EXPECTED_FAILURE = "expected failure"
    UNEXPECTED_SUCCESS = "unexpected success"


@dataclass(frozen=True)
class CaseResult:
    """One test's name, outcome and, unless it passed, the reason in one line."""

    name: str
    outcome: Outcome
    reason: str = ""


@dataclass
class SuiteReport:
    """The tests of one run and their outcomes; ``passed`` when none failed or errored."""

    suite: str
    device: str
    records: list[CaseResult] = field(default_factory=list)

    def count(self, outcome: Outcome) -> int:
        """How many tests ended with ``outcome``."""
        return sum(1 for record in self.records if record.outcome is outcome)

    @property
    def passed(self) -> bool:
        """No test failed or errored. An unexpected success is listed, not a failure: torch's
        expected failures are written for CUDA's kernels, and a device that runs the CPU's
        agrees with the CPU where CUDA does not."""
        bad = (Outcome.FAILED, Outcome.ERROR)
        return not any(record.outcome in bad for record in self.records)

    def summary(self) -> str:
        """One line: the suite, the device and the count of each outcome."""
        counts = ", ".join(
            f"{self.count(outcome)} {outcome.value}" for outcome in Outcome if self.count(outcome)
        )
        return f"{self.suite} on {self.device}: {len(self.records)} tests: {counts or 'none run'}"

    def per_file(self) -> dict[str, SuiteReport]:
        """The records grouped by the file their name starts with (``file.py::Class::test``)."""
        files: dict[str, SuiteReport] = {}
        for record in self.records:
            if "::" in record.name or record.name.endswith(".py"):
                name = record.name.partition("::")[0]
                files.setdefault(name, SuiteReport(name, self.device)).records.append(record)
        return files

    def format(self) -> str:
        """The summary (and each file's), then one line per test that failed, errored or
        unexpectedly passed."""
        lines = [self.summary()]
        lines += [f"  {report.summary()}" for report in self.per_file().values()]
        shown = (Outcome.FAILED, Outcome.ERROR, Outcome.UNEXPECTED_SUCCESS)
        for record in self.records:
            if record.outcome in shown:
                lines.append(f"  {record.outcome.value.upper()} {record.name}: {record.reason}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        """The report as JSON-ready data."""
        return {
            "suite": self.suite,
            "device": self.device,
            "passed": self.passed,
            "counts": {outcome.value: self.count(outcome) for outcome in Outcome},
            "tests": [
                {"name": r.name, "outcome": r.outcome.value, "reason": r.reason}
                for r in self.records
            ],
        }


def _reason(error: _ExcInfo | str) -> str:
    """An exception's type and first meaningful line (a skip's reason as given)."""
    if isinstance(error, str):
        return error
    kind, value, _ = error
    text = "".join(traceback.format_exception_only(kind, value)).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    head = lines[0] if lines else kind.__name__
    if len(lines) > 1 and head.endswith(":"):  # torch's "Tensor-likes are not close!" style
        head = f"{head} {lines[1]}"
    return head[:300]


class _Recorder(unittest.TestResult):
    """A ``TestResult`` that keeps one record per test, with the reason for each non-pass.

    The ``add*`` methods are unittest's hooks, named as unittest calls them."""

    def __init__(self, verbose: bool) -> None:
        super().__init__()
        self.records: list[CaseResult] = []
        self._verbose = verbose

    def _add(self, test: unittest.TestCase, outcome: Outcome, reason: str = "") -> None:
        name = test.id().rpartition(".")[2]
        self.records.append(CaseResult(name, outcome, reason))
        if self._verbose:
            print(f"{outcome.value:<18} {name}{': ' + reason if reason else ''}", flush=True)

    def addSuccess(self, test: unittest.TestCase) -> None:
        self._add(test, Outcome.PASSED)

    def addFailure(self, test: unittest.TestCase, err: _ExcInfo) -> None:  # type: ignore[override]
        self._add(test, Outcome.FAILED, _reason(err))

    def addError(self, test: unittest.TestCase, err: _ExcInfo) -> None:  # type: ignore[override]
        self._add(test, Outcome.ERROR, _reason(err))

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        self._add(test, Outcome.SKIPPED, reason)

    def addExpectedFailure(self, test: unittest.TestCase, err: _ExcInfo) -> None:  # type: ignore[override]
        self._add(test, Outcome.EXPECTED_FAILURE, _reason(err))

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        self._add(test, Outcome.UNEXPECTED_SUCCESS, "marked as an expected failure, but passed")


def prepare_device(emulated: str | None = None, backend: str | None = None) -> str:
    """Make a PrivateUse1 device exist here and return its type name.

    ``emulated`` (``TYPE:COUNT``) installs the emulated device; ``backend`` imports a module that
    registers a vendor's own PrivateUse1 device (e.g. ``torch_acme``). Raises ``SuiteError`` when
    torch's device-generic machinery was imported first (it would not see the device), when the
    module cannot be imported, or when no PrivateUse1 device is available afterwards.
    """
    import torch

    if "torch.testing._internal.common_device_type" in sys.modules:
        raise SuiteError(
            "torch.testing._internal.common_device_type was imported before the device was "
            "set up, so torch's device-generic tests would not see it: run the suite in a fresh "
            "process (python -m anyaccel.testing.torch_suites ...)"
        )
    if emulated is not None:
        from anyaccel.emulated.spec import parse_spec
        from anyaccel.testing.emulated import install

        try:
            spec = parse_spec(emulated)
        except ValueError as error:
            raise SuiteError(f"--emulated {emulated!r}: {error} (e.g. npu:2)") from error
        install(spec.device_type, spec.device_count, spec.memory_capacity)
    if backend is not None:
        try:
            importlib.import_module(backend)
        except ImportError as error:
            raise SuiteError(f"--backend {backend!r} cannot be imported: {error}") from error
    name = torch._C._get_privateuse1_backend_name()
    module = getattr(torch, name, None)
    if name == "privateuseone" or not callable(getattr(module, "is_available", None)):
        raise SuiteError(
            "no PrivateUse1 device is registered in this process: give --emulated TYPE:COUNT "
            "(anyaccel's emulated device) or --backend MODULE (your runtime, which renames "
            "PrivateUse1 and registers torch.<type>)"
        )
    if not module.is_available():  # type: ignore[union-attr]
        raise SuiteError(f"torch.{name}.is_available() is False: no {name} device to test")
    return name


def run_tests(
    suite: unittest.TestSuite, name: str, device: str, verbose: bool = False
) -> SuiteReport:
    """Run ``suite`` and return what became of each test."""
    recorder = _Recorder(verbose)
    suite.run(recorder)
    return SuiteReport(name, device, recorder.records)
