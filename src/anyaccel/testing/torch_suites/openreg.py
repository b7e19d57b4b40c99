"""PyTorch's OpenReg test files, run against the emulated device named after OpenReg.

OpenReg (``test/cpp_extensions/open_registration_extension/torch_openreg`` in PyTorch's
repository) is torch's reference PrivateUse1 backend; its ``tests/test_*.py`` say what a backend
should do. Given a checkout's ``tests`` directory, each file runs under pytest in a process of
its own, with the emulated device installed as ``openreg`` and a stand-in for the
``torch_openreg`` package the files import (its own C++ helpers are not ours: a test that
reaches for them errors, and is out of scope). A file that crashes or hangs errors alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from anyaccel.testing.torch_suites import CaseResult, Outcome, SuiteError, SuiteReport

__all__ = ["FILE_TIMEOUT", "SHIM_PLUGIN", "SPEC_ENV", "records_from_junit", "run_openreg_tests"]

#: The pytest plugin each file runs with: installs the device and the stand-in package.
SHIM_PLUGIN = "anyaccel.testing.torch_suites.openreg_shim"
#: The variable that hands the child its emulated spec (``TYPE:COUNT``).
SPEC_ENV = "ANYACCEL_OPENREG_SPEC"
#: Seconds one file may run before it counts as hung.
FILE_TIMEOUT = 900.0


def records_from_junit(xml_text: str, prefix: str) -> list[CaseResult]:
    """One record per ``<testcase>`` of a pytest JUnit XML report, named ``prefix::Class::test``."""
    records = []
    for case in ElementTree.fromstring(xml_text).iter("testcase"):
        owner = case.get("classname", "").rpartition(".")[2]
        owner = "" if owner == Path(prefix).stem else owner  # a module-level test function
        name = "::".join(part for part in (prefix, owner, case.get("name", "")) if part)
        outcome, reason = Outcome.PASSED, ""
        for child, kind in (
            ("failure", Outcome.FAILED),
            ("error", Outcome.ERROR),
            ("skipped", Outcome.SKIPPED),
        ):
            found = case.find(child)
            if found is not None:
                outcome = kind
                text = found.get("message") or (found.text or "").strip()
                reason = " ".join(text.split())[:300]
                if kind is Outcome.SKIPPED and found.get("type") == "pytest.xfail":
                    outcome = Outcome.EXPECTED_FAILURE
                break
        records.append(CaseResult(name, outcome, reason))
    return records


def _run_file(test_file: Path, emulated: str, verbose: bool) -> list[CaseResult]:
    """``test_file`` under pytest in a child process; its records, or one error if it died."""
    with tempfile.TemporaryDirectory(prefix="anyaccel-openreg-") as scratch:
        report = Path(scratch) / "junit.xml"
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            SHIM_PLUGIN,
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
            "-o",
            "junit_family=xunit1",
            str(test_file),
        ]
        env = {**os.environ, SPEC_ENV: emulated}
        try:
            done = subprocess.run(
                command,
                cwd=scratch,
                env=env,
                capture_output=True,
                text=True,
                timeout=FILE_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return [CaseResult(test_file.name, Outcome.ERROR, f"hung: over {FILE_TIMEOUT:g} s")]
        if verbose:
            print(done.stdout[-3000:], done.stderr[-2000:], sep="\n", flush=True)
        if not report.exists():
            tail = " ".join((done.stderr or done.stdout).split()[-40:])
            return [CaseResult(test_file.name, Outcome.ERROR, f"exit {done.returncode}: {tail}")]
        return records_from_junit(report.read_text(), test_file.name)


def run_openreg_tests(
    path: str | Path, emulated: str = "openreg:2", verbose: bool = False
) -> SuiteReport:
    """Run every ``test_*.py`` under ``path`` (OpenReg's ``tests`` directory) on the device.

    Raises ``SuiteError`` when ``path`` holds no test file.
    """
    folder = Path(path)
    files = sorted(folder.glob("test_*.py")) if folder.is_dir() else []
    if not files:
        raise SuiteError(
            f"{str(path)!r} holds no test_*.py: give the tests directory of PyTorch's "
            "test/cpp_extensions/open_registration_extension/torch_openreg"
        )
    report = SuiteReport("openreg", emulated.partition(":")[0])
    for test_file in files:
        report.records.extend(_run_file(test_file, emulated, verbose))
    return report
