"""DeepSpeed 0.19.8's own NPU, MLU, SDAA and HPU accelerators, unchanged, as anyaccel backends.

Each class is installed as a plugin through the adapter group ``anyaccel.deepspeed_accelerators``
(a real ``.dist-info`` naming DeepSpeed's module), on anyaccel's simulated runtime for its device,
in a fresh DeepSpeed interpreter: detected, forced by ``DS_ACCELERATOR``, handed over with
``set_accelerator``, shown in the report, and passed by the conformance kit. The four
interpreters run side by side (each imports DeepSpeed once).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.ports import free_port

from .conftest import ANYACCEL_SRC, child_env

_CLASSES = {
    "npu": "deepspeed.accelerator.npu_accelerator:NPU_Accelerator",
    "mlu": "deepspeed.accelerator.mlu_accelerator:MLU_Accelerator",
    "sdaa": "deepspeed.accelerator.sdaa_accelerator:SDAA_Accelerator",
    "hpu": "deepspeed.accelerator.hpu_accelerator:HPU_Accelerator",
}

_CHILD = """
import importlib, json, os, sys, warnings
import torch

name, reference = sys.argv[1], sys.argv[2]
if name != "hpu":  # torch_npu, torch_mlu and torch_sdaa name torch's PrivateUse1 device so
    torch.utils.rename_privateuse1_backend(name)
import anyaccel
from anyaccel.testing import simulated
from anyaccel.testing.conformance import CHECKS, run_conformance

simulation = getattr(simulated, f"simulate_{name}")
runtime = simulation(2, lazy_mode=True) if name == "hpu" else simulation(2)
out = {}
with runtime:
    module, _, attribute = reference.partition(":")
    cls = getattr(importlib.import_module(module), attribute)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acc = anyaccel.get_accelerator()
    report = anyaccel.detection_report()
    out["detected"] = type(acc).__qualname__
    out["report"] = report.format()
    out["warnings"] = [str(w.message) for w in caught]
    out["devices"] = acc.device_count()
    out["comm"] = acc.communication_backend_name()
    out["adam"] = getattr(acc.get_op_builder("CPUAdamBuilder"), "__name__", None)

    os.environ["DS_ACCELERATOR"] = name
    anyaccel.reset_accelerator()
    out["forced"] = type(anyaccel.get_accelerator()).__qualname__
    del os.environ["DS_ACCELERATOR"]

    anyaccel.reset_accelerator()
    anyaccel.set_accelerator(cls())
    out["set"] = type(anyaccel.get_accelerator()).__qualname__
    conformance = run_conformance(cls, [c for c in CHECKS if c != "compile_backend"])
    out["conformance"] = conformance.format()
    out["passed"] = conformance.passed

    # anyaccel's launcher glue on top: one rank, over gloo (the vendor's collective library
    # needs the hardware); it selects the rank's device through the DeepSpeed class.
    import torch.distributed as dist
    from anyaccel.distributed import init_distributed

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[3])
    info = init_distributed("gloo", rank=0, world_size=1)
    total = torch.ones(3)
    dist.all_reduce(total)
    out["dist"] = [info.rank, info.world_size, dist.get_backend(), total.tolist()]
    dist.destroy_process_group()
print(json.dumps(out))
"""


def _install(site: Path) -> None:
    info = site / "ds_vendor_accelerators-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: ds-vendor-accelerators\nVersion: 1.0\n"
    )
    entries = "".join(f"{name} = {reference}\n" for name, reference in _CLASSES.items())
    (info / "entry_points.txt").write_text(f"[anyaccel.deepspeed_accelerators]\n{entries}")


@pytest.fixture(scope="module")
def results(ds_python: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    site = tmp_path_factory.mktemp("site")
    _install(site)
    env = child_env()
    env["PYTHONPATH"] = f"{site}:{ANYACCEL_SRC}"
    env["ASCEND_HOME_PATH"] = str(site)  # CANN's set_env.sh sets it; DeepSpeed's builders read it
    children = {
        name: subprocess.Popen(
            [ds_python, "-c", _CHILD, name, reference, str(free_port())],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name, reference in _CLASSES.items()
    }
    out: dict[str, Any] = {}
    for name, child in children.items():
        stdout, stderr = child.communicate(timeout=240)
        assert child.returncode == 0, f"{name}: exit {child.returncode}\n{stderr}"
        out[name] = json.loads(stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("name", list(_CLASSES))
def test_deepspeed_class_is_an_anyaccel_backend(results: dict[str, Any], name: str) -> None:
    got = results[name]
    cls = _CLASSES[name].partition(":")[2]
    assert got["detected"] == cls, got  # ahead of anyaccel's own backend of that name
    assert got["forced"] == cls
    assert got["set"] == cls
    assert got["devices"] == 2
    assert (
        got["report"].splitlines()[0] == f"accelerator: {name} ({_CLASSES[name].replace(':', '.')})"
    )
    assert f"{name} (plugin ds-vendor-accelerators)" in got["report"]
    assert not [w for w in got["warnings"] if "plugin" in w], got["warnings"]
    assert got["passed"], got["conformance"]
    assert got["adam"] == "CPUAdamBuilder"  # DeepSpeed's op builders, through anyaccel
    assert got["dist"] == [0, 1, "gloo", [1.0, 1.0, 1.0]]
