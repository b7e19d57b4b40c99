"""torch's device-generic suites on a PrivateUse1 device: the report, the selection, the runs."""

from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from anyaccel.testing.torch_suites import CaseResult, Outcome, SuiteError, SuiteReport
from anyaccel.testing.torch_suites.openreg import records_from_junit, run_openreg_tests

from .worker import run_python

needs_torch_testing = pytest.mark.skipif(
    importlib.util.find_spec("expecttest") is None,
    reason="torch.testing._internal imports expecttest (pip install expecttest)",
)


def _report() -> SuiteReport:
    return SuiteReport(
        "opinfo",
        "npu",
        [
            CaseResult("a.py::T::test_one", Outcome.PASSED),
            CaseResult("a.py::T::test_two", Outcome.FAILED, "AssertionError: not close"),
            CaseResult("b.py::T::test_three", Outcome.SKIPPED, "non-deterministic"),
        ],
    )


def test_report_counts_each_outcome_and_fails_on_a_failure() -> None:
    report = _report()
    assert (report.count(Outcome.PASSED), report.count(Outcome.FAILED)) == (1, 1)
    assert not report.passed
    assert report.summary() == "opinfo on npu: 3 tests: 1 passed, 1 failed, 1 skipped"


def test_report_passes_when_only_skips_expected_failures_and_unexpected_successes_remain() -> None:
    report = SuiteReport(
        "x",
        "npu",
        [
            CaseResult("t", Outcome.EXPECTED_FAILURE, "known"),
            CaseResult("u", Outcome.UNEXPECTED_SUCCESS, "passed"),
        ],
    )
    assert report.passed
    assert "UNEXPECTED SUCCESS u: passed" in report.format()


def test_report_lists_each_failure_with_its_reason_and_each_files_counts() -> None:
    text = _report().format()
    assert "FAILED a.py::T::test_two: AssertionError: not close" in text
    assert "a.py on npu: 2 tests: 1 passed, 1 failed" in text
    assert "b.py on npu: 1 tests: 1 skipped" in text
    assert "test_three" not in text  # a skip is counted, not listed


def test_report_as_json_data() -> None:
    data = _report().to_dict()
    assert data["passed"] is False
    assert data["counts"] == {
        "passed": 1,
        "failed": 1,
        "error": 0,
        "skipped": 1,
        "expected failure": 0,
        "unexpected success": 0,
    }
    json.dumps(data)


def test_junit_records_keep_each_outcome_and_reason() -> None:
    xml = """<testsuites><testsuite>
      <testcase classname="test_x.TestA" name="test_ok"/>
      <testcase classname="test_x.TestA" name="test_bad"><failure message="boom
        here">trace</failure></testcase>
      <testcase classname="test_x.TestA" name="test_err"><error message="broke"/></testcase>
      <testcase classname="test_x.TestA" name="test_skip"><skipped message="why"/></testcase>
      <testcase classname="test_x" name="test_free"/>
      <testcase classname="" name="test_x"><error message="collection failure"/></testcase>
    </testsuite></testsuites>"""
    records = records_from_junit(xml, "test_x.py")
    assert [(r.name, r.outcome, r.reason) for r in records] == [
        ("test_x.py::TestA::test_ok", Outcome.PASSED, ""),
        ("test_x.py::TestA::test_bad", Outcome.FAILED, "boom here"),
        ("test_x.py::TestA::test_err", Outcome.ERROR, "broke"),
        ("test_x.py::TestA::test_skip", Outcome.SKIPPED, "why"),
        ("test_x.py::test_free", Outcome.PASSED, ""),
        ("test_x.py::test_x", Outcome.ERROR, "collection failure"),
    ]


def test_select_takes_names_and_variants_and_leaves_skips_out() -> None:
    from anyaccel.testing.torch_suites.compare_cpu import select

    entries = [
        SimpleNamespace(name="add", variant_test_name=""),
        SimpleNamespace(name="norm", variant_test_name="fro"),
        SimpleNamespace(name="norm", variant_test_name=""),
    ]
    assert select(entries, ["norm.fro"]) == [entries[1]]
    assert select(entries, ["norm"]) == entries[1:]
    assert select(entries, None, skip=["norm"]) == [entries[0]]


def test_select_refuses_an_unknown_name_naming_the_near_ones() -> None:
    from anyaccel.testing.torch_suites.compare_cpu import UnknownTestError, select

    entries = [SimpleNamespace(name="softmax", variant_test_name="")]
    with pytest.raises(UnknownTestError, match="'softmaxx' is not in torch's database; near"):
        select(entries, ["softmaxx"])


def test_openreg_runner_refuses_a_folder_without_test_files(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match=r"holds no test_\*\.py"):
        run_openreg_tests(tmp_path)


def test_command_refuses_a_backend_that_cannot_be_imported() -> None:
    done = run_python(
        "from anyaccel.testing.torch_suites.__main__ import main; "
        "raise SystemExit(main(['opinfo', '--backend', 'no_such_runtime_xyz']))"
    )
    assert done.returncode == 2, done.stderr
    assert "--backend 'no_such_runtime_xyz' cannot be imported" in done.stderr


@needs_torch_testing
def test_device_must_come_before_torchs_test_machinery() -> None:
    done = run_python(
        "import torch.testing._internal.common_device_type\n"
        "from anyaccel.testing.torch_suites import SuiteError, prepare_device\n"
        "try:\n"
        "    prepare_device('npu:1')\n"
        "except SuiteError as error:\n"
        "    print(error)\n"
    )
    assert "run the suite in a fresh process" in done.stdout, done.stderr


@needs_torch_testing
def test_opinfo_and_module_subsets_match_the_cpu_on_the_emulated_device() -> None:
    script = textwrap.dedent(
        """
        import json, torch
        from anyaccel.testing.torch_suites import prepare_device, run_tests
        device = prepare_device("npu:1")
        from anyaccel.testing.torch_suites import compare_cpu
        ops = compare_cpu.opinfo_tests(
            device, ["add", "mul", "softmax", "sum", "nn.functional.dropout"], [torch.float32]
        )
        modules = compare_cpu.module_tests(device, ["nn.Linear"], [torch.float32])
        reports = [run_tests(ops, "opinfo", device), run_tests(modules, "modules", device)]
        print(json.dumps([report.to_dict() for report in reports]))
        """
    )
    done = run_python(script, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ops, modules = json.loads(done.stdout.strip().splitlines()[-1])
    assert ops["passed"], ops
    assert ops["counts"]["passed"] >= 5  # add, mul, softmax (two variants), sum
    names = {test["name"] for test in ops["tests"]}
    assert "test_compare_cpu_add_npu_float32" in names
    assert modules["passed"], modules
    assert modules["counts"]["passed"] >= 1  # nn.Linear (train and eval apart if they differ)


@needs_torch_testing
def test_openreg_runner_runs_each_file_on_the_device_named_openreg(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(
        textwrap.dedent(
            """
            import torch
            import torch_openreg  # the runner's stand-in

            def test_device_is_named_openreg():
                assert (torch.ones(2, device="openreg:1") * 2).device == torch.device("openreg:1")
                assert torch.openreg.device_count() == 2

            def test_a_failure_is_reported():
                assert torch.zeros(1, device="openreg").item() == 1, "zero is not one"
            """
        )
    )
    (tmp_path / "test_crash.py").write_text("import os\nos._exit(3)\n")
    report = run_openreg_tests(tmp_path)
    outcomes = {record.name: record.outcome for record in report.records}
    assert outcomes["test_probe.py::test_device_is_named_openreg"] is Outcome.PASSED
    assert outcomes["test_probe.py::test_a_failure_is_reported"] is Outcome.FAILED
    assert outcomes["test_crash.py"] is Outcome.ERROR


def test_a_tensor_passed_twice_stays_one_tensor_on_the_device() -> None:
    # KLDivLoss's scalar inputs pass one tensor as input and target: its two gradients meet
    import torch

    from anyaccel.testing.torch_suites.compare_cpu import _moved

    shared, other = torch.randn(3, requires_grad=True), torch.randn(2)
    args, kwargs = _moved(((shared, shared, other), {"target": shared}), "cpu")
    assert args[0] is args[1] is kwargs["target"] and args[2] is not args[0]
    assert args[0].is_leaf and args[0].requires_grad and not args[2].requires_grad
    assert torch.equal(args[0], shared) and args[0] is not shared
