"""Plugins: accelerators from installed distributions join detection through entry points."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import anyaccel
from anyaccel import detection, plugins, registry
from anyaccel.detection import BackendCandidate
from anyaccel.errors import AcceleratorUnavailableError, UnknownAcceleratorError
from anyaccel.plugins import PluginError, PluginWarning, resolve_priority

pytestmark = pytest.mark.filterwarnings("ignore::anyaccel.errors.CpuFallbackWarning")

_counter = itertools.count()
_IMPORT_LOG = "_anyaccel_test_plugin_imports"

_WORKING = """
from anyaccel.backends.cpu import CpuAccelerator
from anyaccel.detection import ProbeOutcome

IMPORTS.append(__name__)


class Board(CpuAccelerator):
    _name = "board"
    detection_priority = {priority!r}

    @staticmethod
    def probe():
        return ProbeOutcome.found("a board on the test bench", 1)
"""

Install = Callable[..., str]


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """Install a distribution with one ``anyaccel.accelerators`` entry point on ``sys.path``."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    created: list[str] = []

    def install_plugin(
        dist: str, name: str, source: str, attribute: str = "Board", priority: object = 0
    ) -> str:
        module = f"plugin_{dist.replace('-', '_')}_{next(_counter)}"
        body = source.format(priority=priority) if "{priority" in source else source
        header = f"import builtins\nIMPORTS = builtins.__dict__.setdefault({_IMPORT_LOG!r}, [])"
        (site / f"{module}.py").write_text(header + "\n" + textwrap.dedent(body))
        info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        points = info / "entry_points.txt"
        previous = points.read_text() if points.exists() else "[anyaccel.accelerators]\n"
        points.write_text(previous + f"{name} = {module}:{attribute}\n")
        created.append(module)
        return module

    yield install_plugin
    for module in created:
        sys.modules.pop(module, None)
    anyaccel.reset_accelerator()


@pytest.fixture
def imports() -> Iterator[list[str]]:
    """The plugin modules imported during the test, in order."""
    import builtins

    log: list[str] = builtins.__dict__.setdefault(_IMPORT_LOG, [])
    log.clear()
    yield log
    log.clear()


def _row(candidate_name: str) -> detection.ProbeRecord:
    rows = [p for p in anyaccel.detection_report().probes if p.name == candidate_name]
    assert rows, f"no trace row for {candidate_name!r}"
    return rows[0]


# ---------------------------------------------------------------- discovery and selection
def test_installed_plugin_is_selected_without_any_user_code(install: Install) -> None:
    install("acme-accel", "acme", _WORKING, priority="before:cuda")
    acc = anyaccel.get_accelerator()
    assert type(acc).__name__ == "Board"
    row = _row("acme")
    assert row.candidate == "acme (plugin acme-accel)"
    assert row.decision == "selected"
    assert row.priority == 899


def test_ds_accelerator_accepts_a_plugin_name(
    install: Install, monkeypatch: pytest.MonkeyPatch
) -> None:
    install("acme-accel", "acme", _WORKING, priority="after:generic")
    monkeypatch.setenv("DS_ACCELERATOR", "acme")
    assert type(anyaccel.get_accelerator()).__name__ == "Board"
    assert "acme" in anyaccel.SUPPORTED_ACCELERATOR_LIST
    assert anyaccel.detection_report().how == "DS_ACCELERATOR"


def test_supported_list_names_plugins_before_any_detection(install: Install) -> None:
    install("acme-accel", "acme", _WORKING, priority="after:generic")
    anyaccel.reset_accelerator()  # plugins unloaded, nothing detected yet
    assert "acme" in anyaccel.SUPPORTED_ACCELERATOR_LIST
    names = list(anyaccel.SUPPORTED_ACCELERATOR_LIST)
    assert names.index("generic") < names.index("acme") < names.index("cpu")
    assert names == anyaccel.SUPPORTED_ACCELERATOR_LIST
    assert len(anyaccel.SUPPORTED_ACCELERATOR_LIST) == len(names)
    assert anyaccel.SUPPORTED_ACCELERATOR_LIST[-1] == "cpu"
    assert "acme" in repr(anyaccel.SUPPORTED_ACCELERATOR_LIST)


def test_plugin_priority_places_it_relative_to_builtins(install: Install) -> None:
    install("late-accel", "late", _WORKING, priority="after:generic")
    order = [c.name for c in detection.registered_backends()]
    assert order.index("generic") < order.index("late") < order.index("cpu")


def test_plugins_load_lazily_not_at_import(install: Install, imports: list[str]) -> None:
    site = Path(sys.path[0])
    install("acme-accel", "acme", _WORKING, priority="before:cuda")
    script = (
        "import sys, warnings; warnings.simplefilter('ignore'); import anyaccel\n"
        "print('plugins' if 'anyaccel.plugins' in sys.modules else 'no-plugins')\n"
        "print(type(anyaccel.get_accelerator()).__name__)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path])}
    env.pop("DS_ACCELERATOR", None)
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["no-plugins", "Board"]


# ---------------------------------------------------------------- failures never crash detection
def test_plugin_that_fails_to_import_is_passed_over_with_a_warning(install: Install) -> None:
    install("bad-accel", "bad", "raise ImportError('libbad.so: cannot open shared object')\n")
    with pytest.warns(PluginWarning, match="libbad.so"):
        acc = anyaccel.get_accelerator()
    assert acc._name == "cpu"
    row = _row("bad")
    assert (row.kind, row.decision) == ("broken", "passed over")
    assert "libbad.so" in row.reason


def test_forcing_a_plugin_that_fails_to_import_names_the_error(
    install: Install, monkeypatch: pytest.MonkeyPatch
) -> None:
    install("bad-accel", "bad", "raise ImportError('libbad.so: cannot open shared object')\n")
    monkeypatch.setenv("DS_ACCELERATOR", "bad")
    with pytest.warns(PluginWarning), pytest.raises(AcceleratorUnavailableError, match="libbad"):
        anyaccel.get_accelerator()


def test_plugin_whose_probe_raises_is_passed_over_with_a_warning(install: Install) -> None:
    source = _WORKING.replace(
        'return ProbeOutcome.found("a board on the test bench", 1)',
        'raise OSError("firmware not responding")',
    )
    install("flaky-accel", "flaky", source, priority="before:cuda")
    with pytest.warns(PluginWarning, match="firmware not responding"):
        acc = anyaccel.get_accelerator()
    assert acc._name == "cpu"
    row = _row("flaky")
    assert row.kind == "broken"
    assert "OSError: firmware not responding" in row.reason


def test_entry_point_that_is_not_a_class_is_passed_over(install: Install) -> None:
    install("odd-accel", "odd", "NOT_A_CLASS = 42\n", attribute="NOT_A_CLASS")
    with pytest.warns(PluginWarning, match="not an accelerator class"):
        assert anyaccel.get_accelerator()._name == "cpu"


def test_invalid_priority_makes_the_plugin_broken(install: Install) -> None:
    install("odd-accel", "odd", _WORKING, priority="sometime")
    with pytest.warns(PluginWarning, match="'sometime' is not understood"):
        assert anyaccel.get_accelerator()._name == "cpu"
    assert _row("odd").kind == "broken"


def test_priority_naming_an_unknown_backend_falls_back_to_the_default(install: Install) -> None:
    install("acme-accel", "acme", _WORKING, priority="before:quantum")
    with pytest.warns(PluginWarning, match="'quantum', which is not a registered backend"):
        anyaccel.get_accelerator()
    assert _row("acme").priority == resolve_priority(
        plugins.DEFAULT_PRIORITY, detection.registered_backends()
    )


def test_plugin_without_probe_is_probed_through_is_available(install: Install) -> None:
    source = """
    from anyaccel.backends.cpu import CpuAccelerator

    class Board(CpuAccelerator):
        _name = "board"
        detection_priority = 1
    """
    install("plain-accel", "plain", source)
    assert type(anyaccel.get_accelerator()).__name__ == "Board"
    assert "is_available() is True" in _row("plain").reason


# ---------------------------------------------------------------- names
def test_plugin_claiming_a_builtin_name_is_rejected_and_never_imported(
    install: Install, imports: list[str]
) -> None:
    module = install("evil-accel", "cpu", _WORKING, priority=1)
    with pytest.warns(PluginWarning, match="reserved by anyaccel's built-in 'cpu' backend"):
        acc = anyaccel.get_accelerator()
    assert type(acc).__name__ == "CpuAccelerator"
    assert module not in imports
    rejected = [p for p in anyaccel.detection_report().probes if "plugin" in p.candidate]
    assert [(p.candidate, p.kind) for p in rejected] == [("cpu (plugin evil-accel)", "broken")]


def test_two_distributions_claiming_one_name_are_both_rejected(
    install: Install, imports: list[str]
) -> None:
    first = install("acme-a", "acme", _WORKING, priority=1)
    second = install("acme-b", "acme", _WORKING, priority=1)
    with pytest.warns(PluginWarning, match="claimed by 2 entry points") as record:
        assert anyaccel.get_accelerator()._name == "cpu"
    assert "acme-a" in str(record[0].message) and "acme-b" in str(record[0].message)
    assert first not in imports and second not in imports


def test_allow_list_resolves_a_name_conflict(
    install: Install, imports: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    install("acme-a", "acme", _WORKING, priority=1)
    second = install("acme-b", "acme", _WORKING, priority=1)
    monkeypatch.setenv("ANYACCEL_PLUGINS", "acme_b")
    assert type(anyaccel.get_accelerator()).__name__ == "Board"
    assert imports == [second]


def test_plugin_name_must_be_a_valid_ds_accelerator_value(install: Install) -> None:
    install("caps-accel", "Acme", _WORKING, priority=1)
    with pytest.warns(PluginWarning, match="'Acme' is not a valid DS_ACCELERATOR value"):
        assert anyaccel.get_accelerator()._name == "cpu"
    assert "Acme" not in anyaccel.SUPPORTED_ACCELERATOR_LIST


# ---------------------------------------------------------------- the allow-list
@pytest.mark.parametrize("value", ["", "none", "someone-else"])
def test_allow_list_keeps_other_plugins_unloaded(
    install: Install, imports: list[str], monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    install("acme-accel", "acme", _WORKING, priority=1)
    monkeypatch.setenv("ANYACCEL_PLUGINS", value)
    assert anyaccel.get_accelerator()._name == "cpu"
    assert imports == []
    assert "acme" not in anyaccel.SUPPORTED_ACCELERATOR_LIST
    assert [s.state for s in registry.plugin_statuses()] == ["not allowed"]


def test_forcing_a_plugin_left_out_of_the_allow_list_is_an_unknown_name(
    install: Install, monkeypatch: pytest.MonkeyPatch
) -> None:
    install("acme-accel", "acme", _WORKING, priority=1)
    monkeypatch.setenv("ANYACCEL_PLUGINS", "other")
    monkeypatch.setenv("DS_ACCELERATOR", "acme")
    with pytest.raises(UnknownAcceleratorError, match="'acme' is not a known accelerator"):
        anyaccel.get_accelerator()


@pytest.mark.parametrize("value", ["acme", "acme-accel", "Acme_Accel", "x, acme"])
def test_allow_list_matches_entry_point_or_distribution_name(
    install: Install, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    install("acme-accel", "acme", _WORKING, priority=1)
    monkeypatch.setenv("ANYACCEL_PLUGINS", value)
    assert type(anyaccel.get_accelerator()).__name__ == "Board"


def test_reset_forgets_plugins_that_were_uninstalled(
    install: Install, monkeypatch: pytest.MonkeyPatch
) -> None:
    install("acme-accel", "acme", _WORKING, priority=1)
    assert "acme" in [c.name for c in detection.registered_backends()]
    monkeypatch.setenv("ANYACCEL_PLUGINS", "none")
    anyaccel.reset_accelerator()
    assert "acme" not in [c.name for c in detection.registered_backends()]


# ---------------------------------------------------------------- priority syntax
_CANDIDATES = (
    BackendCandidate("npu", "npu", 300, "m:p", "m:C"),
    BackendCandidate("xpu", "xpu a", 100, "m:p", "m:C"),
    BackendCandidate("xpu", "xpu b", 200, "m:p", "m:C"),
)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [(7, 7), ("42", 42), ("-3", -3), ("before:npu", 299), ("after:npu", 301),
     ("before:xpu", 99), ("after:xpu", 201), (" Before : NPU ", 299)],
)  # fmt: skip
def test_priority_specs(spec: object, expected: int) -> None:
    assert resolve_priority(spec, _CANDIDATES) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [("soon", "'soon' is not understood"), ("before:", "is not understood"),
     (True, "is a bool"), (1.5, "is a float"), ("after:tpu", "use one of npu, xpu")],
)  # fmt: skip
def test_bad_priority_specs_name_the_value_and_the_fix(spec: object, message: str) -> None:
    with pytest.raises(PluginError, match=message):
        resolve_priority(spec, _CANDIDATES)


def test_environments_without_plugins_skip_the_metadata_scan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from anyaccel import plugins

    def no_scan(**_: object) -> object:
        raise AssertionError("importlib.metadata.entry_points should not be called")

    monkeypatch.setattr(plugins.importlib.metadata, "entry_points", no_scan)
    assert plugins._group_declared_on_path() is False
    assert plugins._entry_points() == []


def test_an_installed_plugin_is_seen_by_the_quick_scan(install: Install) -> None:
    from anyaccel import plugins

    install("acme-accel", "acme", _WORKING)
    assert plugins._group_declared_on_path() is True
    assert [ep.name for ep in plugins._entry_points()] == ["acme"]
