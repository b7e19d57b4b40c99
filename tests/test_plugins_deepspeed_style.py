"""Hardware added the DeepSpeed way, on every public base class, as real plugin distributions.

Names are set in ``__init__``: after ``super().__init__()``, before it, or without calling it.

One fresh interpreter per base class runs its three variants through the three paths a vendor
uses (``set_accelerator``, a plugin forced by ``DS_ACCELERATOR``, the conformance kit) and
prints one verdict per path; the three verdicts must agree, and each must be a working backend.
Each variant's distribution lives in its own site directory, put on ``sys.path`` in turn.
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

#: A stand-in runtime: torch.zpu (two boards) on PrivateUse1 renamed to 'zpu'.
_RUNTIME = """
import torch
from anyaccel.testing.simulated import SimulatedDeviceModule

if getattr(torch, "zpu", None) is None:
    torch.utils.rename_privateuse1_backend("zpu")
    torch.zpu = SimulatedDeviceModule("zpu_runtime.zpu", device_type="zpu", device_count=2)
"""

#: One class per (base, variant). ``{init}`` is the body of ``__init__``.
_VARIANTS = {
    "after": "        super().__init__()\n{names}",
    "before": "{names}        super().__init__()\n",
    "nosuper": "{names}",
}
_NAMES = (
    "        self._name = 'zpu'\n"
    "        self._communication_backend_name = 'zccl'\n"
    "        self._compile_backend = 'eager'\n"
)

_HOST_METHODS = """
    visible_devices_env_names = ("ZPU_VISIBLE_DEVICES",)
    def set_device(self, device_index): pass
    def current_device(self): return 0
    def device_count(self): return 2
    def synchronize(self, device_index=None): pass
    def is_available(self): return True
    def set_rng_state(self, new_state, device_index=None): torch.set_rng_state(new_state)
    def get_rng_state(self, device_index=None): return torch.get_rng_state()
    def manual_seed(self, seed): torch.manual_seed(seed)
    def manual_seed_all(self, seed): torch.manual_seed(seed)
    def initial_seed(self): return torch.initial_seed()
    def memory_allocated(self, device_index=None): return 0
    def max_memory_allocated(self, device_index=None): return 0
    def reset_peak_memory_stats(self, device_index=None): pass
    def total_memory(self, device_index=None): return 1 << 30
"""

_BASES = {
    # base: (import line, base expression, extra class body)
    "Accelerator": ("from anyaccel import Accelerator", "Accelerator", _HOST_METHODS),
    "TorchModuleAccelerator": (
        "from anyaccel.backends.torch_module import TorchModuleAccelerator",
        "TorchModuleAccelerator",
        "    runtime_package = 'zpu_runtime'\n"
        "    visible_devices_env_names = ('ZPU_VISIBLE_DEVICES',)\n",
    ),
    "CpuAccelerator": ("from anyaccel.backends.cpu import CpuAccelerator", "CpuAccelerator", ""),
}

_CHILD = """
import json, os, sys, warnings
warnings.simplefilter("ignore")
import anyaccel
from anyaccel.testing.conformance import run_conformance
import zpu_vendor

CHECKS = [c for c in __import__("anyaccel.testing.conformance").testing.conformance.CHECKS
          if c != "compile_backend"]

def use(acc):
    return [acc._name, acc.communication_backend_name(), acc.get_compile_backend(),
            acc.device_count(), acc.current_device_name().split(":")[0],
            acc.memory_allocated() >= 0, type(acc).__name__]

def verdict(make):
    try:
        return ["ok", *use(make())]
    except Exception as error:
        return ["error", f"{type(error).__name__}: {error}"]

def via_set(cls):
    def make():
        anyaccel.set_accelerator(cls())
        return anyaccel.get_accelerator()
    return verdict(make)

def via_plugin(cls, site):
    sys.path.insert(0, site)
    os.environ["DS_ACCELERATOR"] = "zpu"
    try:
        anyaccel.reset_accelerator()
        def make():
            acc = anyaccel.get_accelerator()
            assert type(acc) is cls, f"got {type(acc).__qualname__}, not {cls.__qualname__}"
            return acc
        return verdict(make)
    finally:
        del os.environ["DS_ACCELERATOR"]
        sys.path.remove(site)
        anyaccel.reset_accelerator()

def via_conformance(cls):
    def make():
        report = run_conformance(cls, CHECKS)
        bad = [(r.name, r.messages) for r in report.results if r.status == "failed"]
        assert not bad, bad
        return cls()
    return verdict(make)

out = {}
for variant, site in json.loads(sys.argv[1]).items():
    cls = getattr(zpu_vendor, variant)
    out[variant] = {"set_accelerator": via_set(cls), "plugin": via_plugin(cls, site),
                    "conformance": via_conformance(cls)}
print(json.dumps(out))
"""


def _vendor_module(base: str) -> str:
    import_line, base_expr, body = _BASES[base]
    lines = ["import torch", "import zpu_runtime", import_line, ""]
    for variant, init in _VARIANTS.items():
        lines.append(f"class {variant}({base_expr}):")
        lines.append(textwrap.indent(body, "") if body else "")
        lines.append("    def __init__(self):")
        lines.append(init.format(names=_NAMES).rstrip("\n"))
        lines.append("")
    return "\n".join(lines) + "\n"


def _install(root: Path, base: str) -> dict[str, str]:
    """The vendor module on one path; one distribution per variant, each in its own site."""
    code = root / "code"
    code.mkdir()
    (code / "zpu_runtime.py").write_text(_RUNTIME)
    (code / "zpu_vendor.py").write_text(_vendor_module(base))
    sites = {}
    for variant in _VARIANTS:
        site = root / f"site-{variant}"
        info = site / f"zpu_{variant}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: zpu-{variant}\nVersion: 1.0\n"
        )
        (info / "entry_points.txt").write_text(
            f"[anyaccel.accelerators]\nzpu = zpu_vendor:{variant}\n"
        )
        sites[variant] = str(site)
    return sites


def _run(root: Path, sites: dict[str, str]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "ANYACCEL_PLUGINS")}
    env["PYTHONPATH"] = os.pathsep.join([str(root / "code"), str(SOURCE)])
    env["LOCAL_SIZE"] = "2"  # the CPU base counts launcher ranks as devices
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(sites)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("base", list(_BASES))
def test_every_variant_works_the_same_on_every_path(tmp_path: Path, base: str) -> None:
    verdicts = _run(tmp_path, _install(tmp_path, base))
    device = "cpu" if base == "CpuAccelerator" else "zpu"
    for variant, paths in verdicts.items():
        expected = ["ok", "zpu", "zccl", "eager", 2, device, True, variant]
        assert paths["set_accelerator"] == expected, (variant, paths)
        assert paths["plugin"] == expected, (variant, paths)
        assert paths["conformance"] == expected, (variant, paths)
