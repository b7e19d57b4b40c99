"""``pytest --anyaccel-emulated``: a user's session runs on emulated accelerators.

Each session runs in its own process (pytester's subprocess): torch names PrivateUse1 once per
process, so the emulated device is never installed in the process running these tests.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest
import torch

from anyaccel.emulated.state import MINIMUM_TORCH
from anyaccel.ops.jit.plan import EXTENSIONS_DIR_ENV, extensions_root

pytest_plugins = ["pytester"]

#: The emulated device needs a torch whose PrivateUse1 interfaces its native core is built on.
needs_emulated_device = pytest.mark.skipif(
    tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2]) < MINIMUM_TORCH,
    reason=f"the emulated device needs torch >= {MINIMUM_TORCH[0]}.{MINIMUM_TORCH[1]}",
)

SOURCE = str(Path(__file__).resolve().parents[2] / "src")
#: ``-p`` for the plugin where anyaccel is not installed (no ``pytest11`` entry point to load it).
PLUGIN = (
    ()
    if any(e.name == "anyaccel" for e in importlib.metadata.entry_points(group="pytest11"))
    else ("-p", "anyaccel.testing.pytest_plugin")
)
#: The build cache of this session's user (pytester gives its sessions another home).
EXTENSIONS = str(extensions_root())

#: A user's tests: one reads the accelerator at collection, one has a batch left on the CPU.
USER_TESTS = """
import pytest, torch
from anyaccel import get_accelerator

@pytest.mark.parametrize("device", [get_accelerator().device_name(0)])  # at collection
def test_the_accelerator(device):
    accelerator = get_accelerator()
    print("ACCELERATOR", device, accelerator.device_count(),
          accelerator.communication_backend_name(), torch.ones(1, device=device).device)

def test_a_batch_not_moved():
    model = torch.nn.Linear(3, 1).to(get_accelerator().device_name())
    model(torch.ones(2, 3))  # the batch stays on the CPU
"""


@pytest.fixture
def user_session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in ("DS_ACCELERATOR", "ANYACCEL_EMULATED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([SOURCE, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv(EXTENSIONS_DIR_ENV, EXTENSIONS)
    pytester.makepyfile(test_user=USER_TESTS)
    return pytester


@needs_emulated_device
def test_the_option_installs_the_devices_before_collection(user_session: pytest.Pytester) -> None:
    result = user_session.runpytest_subprocess(
        *PLUGIN, "-s", "--anyaccel-emulated=npu:2", timeout=600
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "anyaccel: emulated accelerator 'npu' x 2 (collectives: hccl)",
            "*ACCELERATOR npu:0 2 hccl npu:0*",
            "*Expected all tensors to be on the same device*npu:0 and cpu*",
        ]
    )


@needs_emulated_device
def test_the_option_turns_strict_memory_on(user_session: pytest.Pytester) -> None:
    user_session.makepyfile(
        test_strict="from anyaccel.emulated.runtime import native\n"
        "def test_strict():\n"
        "    print('STRICT', native().strict_memory())\n"
    )
    result = user_session.runpytest_subprocess(
        *PLUGIN, "-s", "--anyaccel-emulated=npu:1:strict_memory", "test_strict.py", timeout=600
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*STRICT True*"])


@needs_emulated_device
def test_the_readme_reset_fixture_keeps_the_sessions_devices(user_session: pytest.Pytester) -> None:
    user_session.makeconftest(
        "import anyaccel, pytest\n"
        "@pytest.fixture(autouse=True)\n"
        "def fresh_accelerator(monkeypatch):\n"
        "    monkeypatch.delenv('DS_ACCELERATOR', raising=False)\n"
        "    anyaccel.reset_accelerator()\n"
        "    yield\n"
        "    anyaccel.reset_accelerator()\n"
    )
    result = user_session.runpytest_subprocess(
        *PLUGIN, "-s", "--anyaccel-emulated=npu:2", timeout=600
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*ACCELERATOR npu:0 2 hccl npu:0*"])


def test_without_it_the_cpu_hides_the_bug(
    user_session: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    result = user_session.runpytest_subprocess(*PLUGIN, "-s", timeout=600)
    result.assert_outcomes(passed=2)
    assert "anyaccel: emulated" not in result.stdout.str()


@needs_emulated_device
def test_the_ini_key_does_the_same(user_session: pytest.Pytester) -> None:
    user_session.makeini("[pytest]\nanyaccel_emulated = mlu:1:1GiB\n")
    result = user_session.runpytest_subprocess(*PLUGIN, "-s", timeout=600)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["anyaccel: emulated accelerator 'mlu' x 1 (collectives: cncl)"])


@needs_emulated_device
def test_ds_accelerator_emulated_in_the_environment_does_the_same(
    user_session: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "emulated")
    monkeypatch.setenv("ANYACCEL_EMULATED", "emu:3")
    result = user_session.runpytest_subprocess(*PLUGIN, "-s", timeout=600)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*ACCELERATOR emu:0 3 emuccl emu:0*"])


@needs_emulated_device
def test_a_bad_spec_is_a_usage_error_naming_it_and_the_format(
    user_session: pytest.Pytester,
) -> None:
    result = user_session.runpytest_subprocess(*PLUGIN, "--anyaccel-emulated=npu", timeout=600)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--anyaccel-emulated='npu' cannot run*the format is <type>:<count>*"]
    )


def test_the_choice_is_undone_after_the_session(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # in this process, with no devices asked for, the plugin leaves the environment alone
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    pytester.makepyfile("def test_nothing():\n    pass\n")
    pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert "DS_ACCELERATOR" not in os.environ
