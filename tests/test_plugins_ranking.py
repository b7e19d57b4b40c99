"""How a plugin's failures and omissions show: a stand-in is named, a probe-less plugin waits.

Each test installs a real distribution (a ``.dist-info`` with ``entry_points.txt``) and runs
one fresh interpreter under a timeout that exercises every path it needs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).resolve().parents[1] / "src"


def _install(site: Path, dist: str, module: str, source: str, entry: str) -> None:
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(source)
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[anyaccel.accelerators]\n{entry}\n")


def _run(site: Path, script: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "ANYACCEL_PLUGINS")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(SOURCE)])
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# A vendor runtime registers torch.zpu at import; the accelerator's constructor then fails.
_FAILING_ZPU = """
import torch
from anyaccel.backends.torch_module import TorchModuleAccelerator
from anyaccel.probe import ProbeOutcome
from anyaccel.testing.simulated import SimulatedDeviceModule

torch.utils.rename_privateuse1_backend("zpu")
torch._register_device_module(
    "zpu", SimulatedDeviceModule("zpu_runtime.zpu", device_type="zpu", device_count=2)
)

class Zpu(TorchModuleAccelerator):
    _name = "zpu"

    @staticmethod
    def probe():
        return ProbeOutcome.found("two boards", 2)

    def __init__(self):
        raise OSError("libzpu_driver.so: firmware mismatch")
"""

_STAND_IN = """
import json, os, warnings
import anyaccel
from anyaccel.errors import AcceleratorUnavailableError

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    acc = anyaccel.get_accelerator()
report = anyaccel.detection_report()
out = {
    "class": type(acc).__name__, "name": acc._name,
    "stands_in_for": list(report.stands_in_for),
    "top": report.format().splitlines()[:2],
    "selected": [p.reason for p in report.probes if p.decision == "selected"],
    "warnings": [str(w.message) for w in caught],
}
os.environ["DS_ACCELERATOR"] = "zpu"
anyaccel.reset_accelerator()
try:
    anyaccel.get_accelerator()
    out["forced"] = "no error"
except AcceleratorUnavailableError as error:
    out["forced"] = str(error)
print(json.dumps(out))
"""


def test_a_failed_plugin_is_never_quietly_replaced(tmp_path: Path) -> None:
    _install(tmp_path, "zpu-runtime", "zpu_plugin", _FAILING_ZPU, "zpu = zpu_plugin:Zpu")
    out = _run(tmp_path, _STAND_IN)
    # The generic backend drives torch.zpu in its place: allowed, but said everywhere.
    assert out["class"] == "GenericAccelerator" and out["name"] == "zpu"
    assert len(out["stands_in_for"]) == 1
    assert "plugin 'zpu' (zpu-runtime)" in out["stands_in_for"][0]
    assert "firmware mismatch" in out["stands_in_for"][0]
    assert out["top"][1].startswith("STAND-IN: 'zpu' stands in for plugin 'zpu' (zpu-runtime)")
    assert "stands in for the failed plugin" in out["selected"][0]
    assert any("in place of plugin 'zpu'" in w for w in out["warnings"]), out["warnings"]
    # Forced by name, the failure is an error naming the plugin and what went wrong.
    assert "zpu (plugin zpu-runtime)" in out["forced"]
    assert "firmware mismatch" in out["forced"]


# A bring-up board on the host, DeepSpeed style, with no probe().
_NO_PROBE = """
from anyaccel.backends.cpu import CpuAccelerator

class Board(CpuAccelerator):
    def __init__(self):
        self._name = "board"
        self._communication_backend_name = "gloo"
"""

_RANKING = """
import json, warnings
import anyaccel
from anyaccel.registry import registered_backends
from anyaccel.testing.simulated import simulate_cuda

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    order = [c.name for c in registered_backends()]
    with simulate_cuda(device_count=1):
        chosen = anyaccel.get_accelerator()._name

# The bring-up recipe: the board, chosen by name, trains a small model in host memory.
import os, torch
os.environ["DS_ACCELERATOR"] = "board"
anyaccel.reset_accelerator()
acc = anyaccel.get_accelerator()
acc.manual_seed(0)
model = torch.nn.Linear(4, 1).to(acc.device())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 4, device=acc.device_name())
y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]], device=acc.device_name())
losses = []
for _ in range(50):
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    acc.synchronize()
    losses.append(loss.item())
print(json.dumps({
    "order": order, "chosen": chosen, "warnings": [str(w.message) for w in caught],
    "trained_on": [type(acc).__name__, acc._name, acc.communication_backend_name()],
    "losses": [losses[0], losses[-1]],
}))
"""


def test_a_plugin_without_a_probe_waits_behind_the_built_in_hardware(tmp_path: Path) -> None:
    _install(tmp_path, "board-bringup", "board_plugin", _NO_PROBE, "board = board_plugin:Board")
    out = _run(tmp_path, _RANKING)
    order = out["order"]
    assert order.index("board") > order.index("cuda")
    assert order.index("board") > order.index("generic")
    assert order.index("board") < order.index("cpu")
    assert out["chosen"] == "cuda"  # a GPU machine keeps its GPU
    assert any("has no probe()" in w and "'board'" in w for w in out["warnings"]), out["warnings"]
    assert out["trained_on"] == ["Board", "board", "gloo"]
    first, last = out["losses"]
    assert last < first / 10, out["losses"]


# A plugin whose accelerator reports a built-in name, set in __init__ (DeepSpeed style).
_IMPOSTOR = """
from anyaccel.backends.cpu import CpuAccelerator

class Impostor(CpuAccelerator):
    def __init__(self):
        super().__init__()
        self._name = "cuda"
"""

_VERDICTS = """
import json, os, warnings
warnings.simplefilter("ignore")
import anyaccel
from anyaccel.testing.conformance import run_conformance
from impostor_plugin import Impostor

out = {}
os.environ["DS_ACCELERATOR"] = "impostor"
try:
    anyaccel.get_accelerator()
    out["plugin"] = "accepted"
except Exception as error:
    out["plugin"] = str(error)
del os.environ["DS_ACCELERATOR"]
anyaccel.reset_accelerator()
try:
    anyaccel.set_accelerator(Impostor())
    out["set_accelerator"] = "accepted"
except Exception as error:
    out["set_accelerator"] = str(error)
report = run_conformance(Impostor, ["contract_members"])
out["conformance"] = " ".join(report.results[0].messages) or "accepted"
print(json.dumps(out))
"""


def test_the_name_rule_gives_one_verdict_on_every_path(tmp_path: Path) -> None:
    entry = "impostor = impostor_plugin:Impostor"
    _install(tmp_path, "impostor-accel", "impostor_plugin", _IMPOSTOR, entry)
    out = _run(tmp_path, _VERDICTS)
    claim = "plugin 'impostor' (impostor-accel) claims a built-in backend's name: _name 'cuda'"
    for path in ("plugin", "set_accelerator", "conformance"):
        assert claim in out[path], (path, out)


# The same claim by an accelerator that only looks like one (no subclass: set_accelerator
# would adopt it, binding defaults and registering its class with anyaccel.Accelerator).
_DUCK_IMPOSTOR = """
from anyaccel.backends.cpu import CpuAccelerator

class Impostor:
    pass

for _member in dir(CpuAccelerator):
    if not _member.startswith("__"):
        setattr(Impostor, _member, getattr(CpuAccelerator, _member))
Impostor._name = "cuda"
"""

_REFUSED_DUCK = """
import json, warnings
warnings.simplefilter("ignore")
import anyaccel
from duck_plugin import Impostor

duck = Impostor()
try:
    anyaccel.set_accelerator(duck)
    error = "accepted"
except anyaccel.InvalidAcceleratorError as refusal:
    error = str(refusal)
print(json.dumps({"error": error, "adopted": isinstance(duck, anyaccel.Accelerator)}))
"""


def test_set_accelerator_refusing_a_look_alike_leaves_it_unadopted(tmp_path: Path) -> None:
    _install(tmp_path, "duck-accel", "duck_plugin", _DUCK_IMPOSTOR, "duck = duck_plugin:Impostor")
    out = _run(tmp_path, _REFUSED_DUCK)
    assert "plugin 'duck' (duck-accel) claims a built-in backend's name" in out["error"], out
    assert out["adopted"] is False  # the old code registered its class before refusing it
