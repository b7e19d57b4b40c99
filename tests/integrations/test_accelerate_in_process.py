"""HF accelerate's adapter in this process: install, uninstall, refusals, versions, environment.

What runs in the test's own process (or one short child): the levers ``install()`` sets and puts
back, what it refuses and leaves untouched, the extras' and versions' messages, and that
``explain()`` and ``install()`` write nothing to the environment beyond the documented variable.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "accelerate", reason="accelerate is not installed (pip install 'anyaccel[accelerate]')"
)

from accelerate.state import AcceleratorState, PartialState

from anyaccel.backends.cpu import CpuAccelerator
from anyaccel.distributed.errors import DistributedSetupError
from anyaccel.integrations import accelerate as integration

from .conftest import ANYACCEL_SRC
from .test_accelerate import TIMEOUT, _env


# ---------------------------------------------------------------------- in this process
@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No launcher or accelerate variables, no accelerate state; undone afterwards."""
    for name in (
        "ACCELERATE_USE_CPU", "ACCELERATE_TORCH_DEVICE", "LOCAL_RANK", "RANK", "WORLD_SIZE",
        "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "LOCAL_WORLD_SIZE",
    ):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    integration.uninstall()
    AcceleratorState._reset_state(reset_partial_state=True)


def test_install_on_cpu_sets_the_cpu_lever_and_uninstall_restores(clean: None) -> None:
    original = PartialState.__init__
    installation = integration.install(CpuAccelerator())
    assert installation.environment == {"ACCELERATE_USE_CPU": "true"}
    assert os.environ["ACCELERATE_USE_CPU"] == "true"
    assert PartialState.__init__ is original  # nothing of accelerate is replaced
    assert integration.install(CpuAccelerator()) is installation  # idempotent
    AcceleratorState._reset_state(reset_partial_state=True)
    integration.uninstall()
    assert "ACCELERATE_USE_CPU" not in os.environ
    assert PartialState.__init__ is original
    assert integration.installed() is None


class _ElsewhereAccelerator(CpuAccelerator):
    """The CPU backend reporting another device (``meta``), for a second, conflicting install."""

    def device_name(self, device_index: int | None = None) -> str:
        return "meta" if device_index is None else f"meta:{device_index}"

    def current_device_name(self) -> str:
        return "meta:0"


def test_a_refused_reinstall_leaves_the_first_installation_in_place(clean: None) -> None:
    from accelerate import Accelerator

    original = PartialState.__init__
    first = integration.install(CpuAccelerator())
    Accelerator()  # accelerate's state now exists, on the CPU
    with pytest.raises(integration.AccelerateStateConflictError, match="already exists on 'cpu'"):
        integration.install(_ElsewhereAccelerator())
    assert integration.installed() is first  # the old code had uninstalled it before refusing
    assert os.environ["ACCELERATE_USE_CPU"] == "true"
    assert PartialState.__init__ is original


@pytest.mark.parametrize(
    ("argument", "named"),
    [
        ("cpu", "not the string 'cpu'.*DS_ACCELERATOR=cpu"),
        (object(), "not <object object at 0x[0-9a-f]+> \\(type object, which lacks"),
        (CpuAccelerator, "got the class CpuAccelerator; call it: CpuAccelerator\\(\\)"),
    ],
)
def test_an_argument_that_is_no_accelerator_is_named_and_changes_nothing(
    clean: None, argument: object, named: str
) -> None:
    from anyaccel.errors import InvalidAcceleratorError

    for call in (integration.install, integration.explain):
        with pytest.raises(InvalidAcceleratorError, match=f"{call.__name__}\\(\\) .*{named}"):
            call(argument)  # type: ignore[operator]
    assert integration.installed() is None and "ACCELERATE_USE_CPU" not in os.environ


def test_install_under_a_launcher_pauses_at_exit_for_gloo_and_refuses_a_bad_pause(
    clean: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from anyaccel.distributed import exit_grace

    real = exit_grace.install_exit_grace
    calls: list[str] = []
    monkeypatch.setattr(exit_grace, "install_exit_grace", lambda: calls.append("x") or True)
    integration.install(CpuAccelerator())  # one process: accelerate runs no process group
    assert calls == []
    integration.uninstall()
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.delenv("MASTER_ADDR", raising=False)  # no rendezvous: install() joins no group
    monkeypatch.delenv("MASTER_PORT", raising=False)
    # MULTI_CPU: DDP on gloo as accelerate names it (under torchrun install() joins the group
    # first, anyaccel_shm: the torchrun tests above)
    installation = integration.install(CpuAccelerator())
    assert (installation.backend, installation.process_group) == ("gloo", None)
    assert calls == ["x"]  # torch's gloo exit abort: see anyaccel.distributed.exit_grace
    integration.uninstall()
    monkeypatch.setattr(exit_grace, "install_exit_grace", real)  # a malformed value now:
    monkeypatch.setenv(exit_grace.EXIT_GRACE_ENV, "soon")
    with pytest.raises(DistributedSetupError, match=exit_grace.EXIT_GRACE_ENV):
        integration.install(CpuAccelerator())
    assert integration.installed() is None and "ACCELERATE_USE_CPU" not in os.environ  # unchanged


def test_uninstall_puts_back_a_value_the_user_had(
    clean: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELERATE_USE_CPU", "no")
    integration.install(CpuAccelerator())
    integration.uninstall()
    assert os.environ["ACCELERATE_USE_CPU"] == "no"


def test_an_accelerate_torch_device_naming_another_device_is_refused(
    clean: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "cuda:1")
    with pytest.raises(integration.AccelerateStateConflictError, match="ACCELERATE_TORCH_DEVICE"):
        integration.install(CpuAccelerator())
    assert integration.installed() is None and "ACCELERATE_USE_CPU" not in os.environ
    assert os.environ["ACCELERATE_TORCH_DEVICE"] == "cuda:1"


def test_explain_under_torchrun_shows_accelerate_alone_runs_one_process(
    clean: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    explanation = integration.explain(CpuAccelerator())
    assert explanation.world_size == 2
    assert explanation.accelerate is not None and explanation.after_install is not None
    if not torch.cuda.is_available():  # on a GPU host accelerate alone picks MULTI_GPU
        alone = explanation.accelerate
        assert (alone.distributed_type, alone.num_processes) == ("NO", 1)
    after = explanation.after_install
    assert (after.distributed_type, after.num_processes, after.backend) == (
        "MULTI_CPU",
        2,
        "gloo",
    )
    assert "MULTI_CPU" in explanation.format()
    assert not PartialState._shared_state  # explain() builds no state


_SHADOW_ACCELERATE = """
__version__ = "1.15.0"


class _Type:
    name = "NO"


class _State:
    device, distributed_type, backend = "shadow:0", _Type(), None


class Accelerator:
    state = _State()
"""


def test_the_child_asks_the_accelerate_this_process_imports(tmp_path: Path) -> None:
    # an accelerate put first on sys.path at run time (not in PYTHONPATH): the child that
    # install() and explain() ask must import that one, as this process would
    (tmp_path / "accelerate").mkdir()
    (tmp_path / "accelerate" / "__init__.py").write_text(_SHADOW_ACCELERATE)
    script = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "from anyaccel.integrations.accelerate import Scenario, ask_frameworks\n"
        "asked = Scenario('which', ('accelerate',))\n"
        "print(ask_frameworks((asked,))['which']['accelerate'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=_env(), capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "'device': 'shadow:0'" in done.stdout.strip().splitlines()[-1], done.stdout


@pytest.mark.parametrize(
    ("environ", "size"),
    [({}, 1), ({"WORLD_SIZE": "4"}, 4), ({"PMI_SIZE": "3"}, 3), ({"WORLD_SIZE": "x"}, 1)],
)
def test_launched_world_size_reads_the_launchers_variables(
    environ: dict[str, str], size: int
) -> None:
    assert integration.launched_world_size(environ) == size


# ---------------------------------------------------------------------- not installed, versions
def test_missing_accelerate_names_the_extra(clean: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "accelerate", None)  # what find_spec sees when absent
    with pytest.raises(
        integration.AccelerateNotInstalledError,
        match=r"'accelerate<2,>=1.0' \(from a clone of anyaccel: pip install -e '\.\[accelerate",
    ):
        integration.install(CpuAccelerator())
    assert integration.installed() is None and "ACCELERATE_USE_CPU" not in os.environ
    section = integration.report_section(CpuAccelerator())
    assert section["installed"] is False and "pip install -e '.[accelerate]'" in section["note"]


def test_missing_transformers_names_the_extra_when_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert integration.check_versions()["transformers"] is None
    with pytest.raises(
        integration.AccelerateNotInstalledError,
        match=r"'transformers<6,>=4.46'.*pip install -e '\.\[transformers\]'",
    ):
        integration.check_versions(require_transformers=True)


@pytest.mark.parametrize(
    ("package", "version", "supported"),
    [
        ("accelerate", "0.34.2", "accelerate>=1.0,<2"),
        ("transformers", "4.40.0", "transformers>=4.46,<6"),
    ],
)
def test_a_version_outside_the_supported_range_is_refused(
    tmp_path: Path, package: str, version: str, supported: str
) -> None:
    """A real (if empty) distribution of the old version, first on the path."""
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text(f"__version__ = {version!r}\n")
    info = tmp_path / f"{package}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
    code = (
        "from anyaccel.integrations import accelerate as a\n"
        "try:\n    a.install()\n"
        "except a.UnsupportedVersionError as error:\n    print(error)\n"
        "    assert a.installed() is None\n"
        "    import os; assert 'ACCELERATE_USE_CPU' not in os.environ\n"
        "else:\n    raise SystemExit('install() accepted ' + repr(a.check_versions()))\n"
    )
    env = _env(PYTHONPATH=os.pathsep.join((str(tmp_path), ANYACCEL_SRC)))
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{package} {version} is installed" in done.stdout
    assert supported in done.stdout and f"pip install -e '.[{package}]'" in done.stdout


# ---------------------------------------------------------------------- the process's environment
class _RecordingEnviron(MutableMapping[str, str]):
    """``os.environ`` stand-in that records every write (and still makes it, on the real one)."""

    def __init__(self, real: MutableMapping[str, str]) -> None:
        self.real = real
        self.writes: list[tuple[str, str, str | None]] = []

    def __getitem__(self, name: str) -> str:
        return self.real[name]

    def __setitem__(self, name: str, value: str) -> None:
        self.writes.append(("set", name, value))
        self.real[name] = value

    def __delitem__(self, name: str) -> None:
        self.writes.append(("delete", name, None))
        del self.real[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.real)

    def __len__(self) -> int:
        return len(self.real)


@pytest.fixture
def recording(clean: None, monkeypatch: pytest.MonkeyPatch) -> _RecordingEnviron:
    """``os.environ`` recorded for the test; a launched rank of two, so every lever is asked."""
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    environ = _RecordingEnviron(os.environ)
    monkeypatch.setattr(os, "environ", environ)
    return environ


def test_explain_writes_nothing_to_the_environment(recording: _RecordingEnviron) -> None:
    """It asks the frameworks in a child; the old code rewrote os.environ around their code."""
    recording.writes.clear()  # what pytest itself wrote for this test
    integration.explain(CpuAccelerator())
    assert recording.writes == []
    assert os.environ is recording  # never replaced either


def test_install_writes_only_its_documented_variable(recording: _RecordingEnviron) -> None:
    recording.writes.clear()  # what pytest itself wrote for this test
    integration.install(CpuAccelerator())
    assert recording.writes == [("set", "ACCELERATE_USE_CPU", "true")]
    integration.uninstall()
    assert recording.writes[1:] == [("delete", "ACCELERATE_USE_CPU", None)]
    assert os.environ is recording


def test_the_frameworks_are_asked_once_for_the_same_settings(
    clean: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """explain(), install() and the report share one child process per settings."""
    monkeypatch.setenv("ANYACCEL_TEST_SETTINGS", os.urandom(8).hex())  # settings not asked yet
    children: list[list[str]] = []
    run = subprocess.run

    def counting(command: list[str], **kwargs: Any) -> Any:
        children.append(command)
        return run(command, **kwargs)

    monkeypatch.setattr(subprocess, "run", counting)
    explanation = integration.explain(CpuAccelerator())
    assert integration.explain(CpuAccelerator()) == explanation
    integration.report_section(CpuAccelerator())
    installation = integration.install(CpuAccelerator())  # asks what explain() asked: no child
    assert len(children) == 1, children
    assert explanation.after_install is not None
    assert installation.distributed_type == explanation.after_install.distributed_type
    integration.uninstall()
    monkeypatch.setenv("ANYACCEL_TEST_SETTINGS", "other")  # other settings: asked again
    integration.explain(CpuAccelerator())
    assert len(children) == 2


def test_answers_are_kept_across_tests_whose_settings_are_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pytest renames PYTEST_CURRENT_TEST for every test: that alone asks nothing again."""
    from anyaccel.integrations.accelerate import asking

    children: list[dict[str, str]] = []

    def child(
        batch: list[asking.Scenario], env: dict[str, str], runtime: Any, timeout: float
    ) -> dict[str, dict[str, dict[str, Any]]]:
        children.append(env)
        return {s.name: {q: {"answer": len(children)} for q in s.ask} for s in batch}

    monkeypatch.setattr(asking, "_ask_child", child)
    scenario = asking.Scenario("kept", ("accelerate",))
    settings = {"ANYACCEL_TEST_SETTINGS": os.urandom(8).hex(), "PYTEST_CURRENT_TEST": "a (call)"}
    first = asking.ask_frameworks((scenario,), settings)
    again = asking.ask_frameworks((scenario,), {**settings, "PYTEST_CURRENT_TEST": "b (setup)"})
    assert again == first and len(children) == 1
    assert children[0]["PYTEST_CURRENT_TEST"] == "a (call)"  # the child still gets it
    other = asking.ask_frameworks((scenario,), {**settings, "ACCELERATE_USE_CPU": "1"})
    assert len(children) == 2 and other["kept"]["accelerate"] == {"answer": 2}
