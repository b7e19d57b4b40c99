"""Misbehaving plugins, installed as real distributions, never hang, kill or impersonate.

Each test installs a distribution (a ``.dist-info`` with ``entry_points.txt`` beside its
module) and detects in a fresh interpreter under a timeout, as a training job would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src"

_PLUGIN = """
import os, sys, threading, time
import anyaccel
from anyaccel.backends.cpu import CpuAccelerator
from anyaccel.detection import ProbeOutcome  # the old spelling, so old code can run it too

IN_PROBE = threading.Event()

def misbehave(where):
    if where == os.environ.get("FAULT_AT"):
        {fault}

misbehave("import")


class Board(CpuAccelerator):
    _name = {name!r}
    detection_priority = 1

    def __init__(self):
        super().__init__()
        misbehave("constructor")

    @staticmethod
    def probe():
        IN_PROBE.set()
        misbehave("probe")
        return ProbeOutcome.found("a board on the bench", 1)
{extra}
"""

_DETECT = """
import json, sys, threading, time, warnings
import anyaccel
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    start = time.perf_counter()
    acc = anyaccel.get_accelerator()
    seconds = time.perf_counter() - start
report = anyaccel.detection_report()
print(json.dumps({
    "name": acc._name, "class": type(acc).__name__, "seconds": seconds,
    "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
    "rows": [[p.candidate, p.kind, p.reason, p.decision, p.seconds] for p in report.probes],
    "plugins": [[s.name, s.state, s.detail] for s in report.plugins],
    "plugin_imported": "board_plugin" in sys.modules,
}))
"""


def install(
    site: Path, fault: str, *, name: str = "board", entry: str = "board", extra: str = ""
) -> None:
    """A distribution ``board-accel`` whose module misbehaves with ``fault`` at ``FAULT_AT``."""
    source = _PLUGIN.format(fault=fault, name=name, extra=textwrap.dedent(extra))
    (site / "board_plugin.py").write_text(source)
    info = site / "board_accel-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: board-accel\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[anyaccel.accelerators]\n{entry} = board_plugin:Board\n"
    )


def run(
    site: Path, script: str, timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "FAULT_AT")}
    full_env.update(env)
    full_env["PYTHONPATH"] = os.pathsep.join([str(site), str(SOURCE)])
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )


def detect(site: Path, timeout: float = 60, **env: str) -> dict[str, Any]:
    done = run(site, _DETECT, timeout, **env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture
def site(tmp_path: Path) -> Path:
    path = tmp_path / "site"
    path.mkdir()
    return path


def _plugin_row(result: dict[str, Any]) -> list[Any]:
    rows = [row for row in result["plugins"] if row[0] == "board"]
    assert len(rows) == 1, result["plugins"]
    return rows[0]


# ---------------------------------------------------------------- re-entrant detection
@pytest.mark.parametrize("where", ["import", "probe", "constructor"])
def test_get_accelerator_from_plugin_code_is_refused_and_detection_finishes(
    site: Path, where: str
) -> None:
    install(site, "anyaccel.get_accelerator()")
    result = detect(site, FAULT_AT=where)
    assert result["name"] == "cpu"
    state, detail = _plugin_row(result)[1:]
    assert state == "broken"
    assert "get_accelerator() while detection runs" in detail
    assert any(
        "PluginWarning" in w and "get_accelerator() while detection runs" in w
        for w in result["warnings"]
    )


def test_the_refusal_names_the_plugin_and_counts_even_if_swallowed(site: Path) -> None:
    fault = (
        "try:\n            anyaccel.get_accelerator()\n"
        "        except anyaccel.AcceleratorError as error:\n"
        "            print('REFUSED:', type(error).__name__, error, file=sys.stderr)"
    )
    install(site, fault)
    done = run(site, _DETECT, FAULT_AT="probe")
    assert done.returncode == 0, done.stderr
    assert "REFUSED: ReentrantDetectionError get_accelerator() was called while anyaccel " in (
        done.stderr
    )
    assert "from plugin 'board' (board-accel) probe" in done.stderr
    result = json.loads(done.stdout)
    assert result["name"] == "cpu"  # swallowing the error does not make the probe count
    assert _plugin_row(result)[1] == "broken"


def test_other_threads_wait_and_all_get_one_instance(site: Path) -> None:
    install(site, "time.sleep(0.5); anyaccel.get_accelerator()")
    script = """
import threading, anyaccel, warnings
warnings.simplefilter("ignore")
found = []
threads = [threading.Thread(target=lambda: found.append(id(anyaccel.get_accelerator())))
           for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(len(found), len(set(found)), anyaccel.get_accelerator()._name)
"""
    done = run(site, script, FAULT_AT="probe")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["8", "1", "cpu"]


# ---------------------------------------------------------------- time limits
@pytest.mark.parametrize("where", ["import", "probe", "constructor"])
def test_plugin_code_that_never_returns_is_abandoned_after_the_limit(
    site: Path, where: str
) -> None:
    install(site, "threading.Event().wait()")
    result = detect(site, timeout=60, FAULT_AT=where, ANYACCEL_PROBE_TIMEOUT="1")
    assert result["name"] == "cpu"  # and within the subprocess's timeout: nothing hung
    state, detail = _plugin_row(result)[1:]
    assert state == "broken"
    assert "did not return within 1.0 s (ANYACCEL_PROBE_TIMEOUT)" in detail
    assert any("PluginWarning" in w and "did not return" in w for w in result["warnings"])
    row = next(r for r in result["rows"] if r[0] == "board (plugin board-accel)")
    assert row[1] == "broken" and row[3] == "passed over"


def test_default_limit_is_ten_seconds_and_documented() -> None:
    from anyaccel import guard

    assert guard.DEFAULT_PROBE_TIMEOUT == 10.0
    docs = (SOURCE.parent / "docs" / "detection.md").read_text()
    assert "ANYACCEL_PROBE_TIMEOUT" in docs


def test_forcing_a_builtin_runs_no_plugin_code(site: Path) -> None:
    install(site, "threading.Event().wait()")
    result = detect(site, timeout=30, FAULT_AT="import", DS_ACCELERATOR="cpu")
    assert result["name"] == "cpu"
    assert result["plugin_imported"] is False
    assert result["plugins"] == []
    assert [row[0] for row in result["rows"]] == ["cpu (fallback)"]


# ---------------------------------------------------------------- containment
@pytest.mark.parametrize(
    ("where", "fault", "said"),
    [
        ("import", "sys.exit(3)", "called sys.exit(3)"),
        ("probe", "sys.exit(3)", "called sys.exit(3)"),
        ("constructor", "sys.exit(3)", "called sys.exit(3)"),
        ("probe", "raise SystemExit('bye')", "called sys.exit('bye')"),
        ("constructor", "raise GeneratorExit('odd')", "raised GeneratorExit: odd"),
    ],
)
def test_plugin_exiting_or_raising_base_exceptions_is_contained(
    site: Path, where: str, fault: str, said: str
) -> None:
    install(site, fault)
    result = detect(site, FAULT_AT=where)
    assert result["name"] == "cpu"
    state, detail = _plugin_row(result)[1:]
    assert state == "broken" and said in detail


def test_keyboard_interrupt_still_reaches_the_user(site: Path) -> None:
    install(site, "raise KeyboardInterrupt")
    script = "import anyaccel\ntry:\n    anyaccel.get_accelerator()\nexcept KeyboardInterrupt:\n"
    script += "    print('interrupted')\n"
    done = run(site, script, FAULT_AT="probe")
    assert done.stdout.strip() == "interrupted", done.stderr


# ---------------------------------------------------------------- names
_DEVICE_CUDA = """
def device_name(self, device_index=None):
    return "cuda" if device_index is None else f"cuda:{device_index}"

Board.device_name = device_name
"""


@pytest.mark.parametrize(
    ("name", "extra", "claim"),
    [
        ("cuda", "", "_name 'cuda'"),
        ("npu", "", "_name 'npu'"),
        ("cpu", "", "_name 'cpu'"),
        ("acme", _DEVICE_CUDA, "'cuda'"),
    ],
)
def test_plugin_reporting_a_builtin_name_is_rejected(
    site: Path, name: str, extra: str, claim: str
) -> None:
    install(site, "pass", name=name, entry="acme", extra=extra)
    result = detect(site)
    assert result["name"] == "cpu" and result["class"] == "CpuAccelerator"
    rows = [row for row in result["plugins"] if row[0] == "acme"]
    assert rows and rows[0][1] == "rejected"
    assert "claims a built-in backend's name" in rows[0][2] and claim in rows[0][2]
    assert any("PluginWarning" in w and claim in w for w in result["warnings"])
    trace = [row for row in result["rows"] if row[0] == "acme (plugin board-accel)"]
    assert trace and trace[0][1] == "broken" and claim in trace[0][2]


_NAMED_IN_INIT = """
def __init__(self):
    CpuAccelerator.__init__(self)
    self._name = "toyhw"  # DeepSpeed's accelerators name themselves in __init__

Board.__init__ = __init__
"""


@pytest.mark.parametrize("forced", [None, "toyhw"])
def test_plugin_naming_itself_in_init_over_an_inherited_name_is_accepted(
    site: Path, forced: str | None
) -> None:
    # The class inherits (here: declares) _name 'cpu'; the constructed accelerator says
    # 'toyhw', the name it is registered under: it claims nothing built-in.
    install(site, "pass", name="cpu", entry="toyhw", extra=_NAMED_IN_INIT)
    result = detect(site, **({"DS_ACCELERATOR": forced} if forced else {}))
    assert (result["name"], result["class"]) == ("toyhw", "Board"), result
    assert [row[:2] for row in result["plugins"]] == [["toyhw", "loaded"]]
    assert not any("PluginWarning" in w for w in result["warnings"]), result["warnings"]


# ---------------------------------------------------------------- fork
_FORK = """
import os, sys, threading, time, warnings
warnings.simplefilter("ignore")
import anyaccel
detecting = threading.Thread(target=anyaccel.get_accelerator, daemon=True)
detecting.start()
def in_probe():  # the module appears in sys.modules before its body has run
    event = getattr(sys.modules.get("board_plugin"), "IN_PROBE", None)
    return event is not None and event.is_set()
while not in_probe():
    time.sleep(0.01)
pid = os.fork()
if pid == 0:
    os.environ["FAULT_AT"] = "none"
    try:
        print("child", anyaccel.get_accelerator()._name, flush=True)
    finally:
        os._exit(0)
os.waitpid(pid, 0)
detecting.join()
print("parent", anyaccel.get_accelerator()._name)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_child_forked_during_detection_detects_on_its_own(site: Path) -> None:
    install(site, "time.sleep(3)")
    done = run(site, _FORK, timeout=60, FAULT_AT="probe")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["child", "board", "parent", "board"]


_FORK_OPS = """
import os, threading, time
from anyaccel.ops import builder, registry
held = threading.Event()
def hold():
    with builder._load_lock, registry._scan_lock:
        held.set()
        time.sleep(30)
threading.Thread(target=hold, daemon=True).start()
held.wait()
pid = os.fork()
if pid == 0:
    ok = builder._load_lock.acquire(timeout=5) and registry._scan_lock.acquire(timeout=5)
    print("child", ok, registry.find_builder_class(
        registry.builder_package("cpu"), "CPUAdamBuilder", "cpu").__name__, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_child_forked_during_op_loading_loads_on_its_own(tmp_path: Path) -> None:
    done = run(tmp_path, _FORK_OPS, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["child", "True", "CPUAdamBuilder"]


# ---------------------------------------------------------------- renamed CPU subclass
def test_a_renamed_cpu_plugin_passes_the_conformance_kit(site: Path) -> None:
    install(site, "pass", name="board")
    script = "import sys\nfrom anyaccel.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    done = subprocess.run(
        [sys.executable, "-c", script, "conformance", "board_plugin:Board"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(SOURCE)])},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tensor_types" in done.stdout


# ---------------------------------------------------------------- the report
_RAISING_SUMMARY = """
def total_memory(self, device_index=None):
    raise RuntimeError("firmware went away")

Board.total_memory = total_memory
"""


def _report(site: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = "import sys\nfrom anyaccel.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    full_env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR",)}
    full_env.update(env, PYTHONPATH=os.pathsep.join([str(site), str(SOURCE)]))
    return subprocess.run(
        [sys.executable, "-c", script, "report", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=full_env,
    )


def test_report_shows_rejected_plugins_and_their_warnings(site: Path) -> None:
    install(site, "pass", name="cuda", entry="acme")
    text = _report(site)
    assert text.returncode == 0, text.stderr
    assert "plugins:" in text.stdout
    assert "acme (board-accel, board_plugin:Board): rejected" in text.stdout
    assert "warnings:" in text.stdout and "PluginWarning" in text.stdout
    data = json.loads(_report(site, "--json").stdout)
    assert [(p["name"], p["state"]) for p in data["report"]["plugins"]] == [("acme", "rejected")]
    assert any("claims a built-in backend's name" in w for w in data["warnings"])


def test_report_shows_not_allowed_plugins(site: Path) -> None:
    install(site, "pass")
    text = _report(site, ANYACCEL_PLUGINS="someone-else")
    assert text.returncode == 0, text.stderr
    assert "board (board-accel, board_plugin:Board): not allowed" in text.stdout


def test_report_shows_a_raising_method_as_an_error_not_a_traceback(site: Path) -> None:
    install(site, "pass", extra=_RAISING_SUMMARY)
    text = _report(site)
    assert text.returncode == 0, text.stderr
    assert "Traceback" not in text.stdout + text.stderr
    assert "total_memory" in text.stdout
    assert "error: RuntimeError: firmware went away" in text.stdout
    data = json.loads(_report(site, "--json").stdout)
    assert data["accelerator"]["total_memory"] == {"error": "RuntimeError: firmware went away"}
    assert data["accelerator"]["name"] == "board"


@pytest.mark.parametrize("name", ["  ", "Toy HW"])
def test_plugin_whose_name_is_no_device_type_is_refused_with_the_fix(site: Path, name: str) -> None:
    install(site, "pass", name=name, entry="toyhw")
    result = detect(site)
    assert result["name"] == "cpu" and result["class"] == "CpuAccelerator"
    rows = [row for row in result["plugins"] if row[0] == "toyhw"]
    assert rows and rows[0][1] == "broken", result["plugins"]
    assert f"_name is {name!r}, which is not a device-type name" in rows[0][2]
    assert any("PluginWarning" in w and "not a device-type name" in w for w in result["warnings"])
