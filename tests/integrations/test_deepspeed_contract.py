"""DeepSpeed's own accelerator contract check, run on every anyaccel backend, in DeepSpeed's venv.

DeepSpeed's unit tests instantiate each accelerator class with ``__init__`` stubbed out, which
fails if any of ``DeepSpeedAccelerator``'s abstract methods is left undefined. Here each
anyaccel backend class gets that check as a subclass of both classes, and DeepSpeed's
``set_accelerator`` must accept it. Backends whose runtime anyaccel simulates in-process are
also detected under the simulation and handed to DeepSpeed, which then answers through them.
"""

from __future__ import annotations

import json

import pytest

from .conftest import run_python
from .test_deepspeed_signatures import backend_classes

_CHECK = """
import json, os, sys, warnings
warnings.simplefilter("ignore")
import deepspeed.accelerator as da
from deepspeed.accelerator.abstract_accelerator import DeepSpeedAccelerator
import importlib
results = {}
for path in sys.argv[1:]:
    module_name, _, class_name = path.rpartition(".")
    cls = getattr(importlib.import_module(module_name), class_name)
    # DeepSpeed's test: instantiating with __init__ stubbed fails on an undefined abstract method.
    probe = type("Probe", (cls, DeepSpeedAccelerator), {"__init__": lambda self: None})
    try:
        probe()
        abstract_ok = ""
    except TypeError as error:
        abstract_ok = str(error)
    instance = cls.__new__(cls)
    da.set_accelerator(instance)
    results[path] = {
        "abstract": abstract_ok,
        "isinstance": isinstance(instance, DeepSpeedAccelerator),
        "handed_over": da.get_accelerator() is instance,
    }
from anyaccel import detection
from anyaccel.testing import simulated
import torch
for name in ("cuda", "npu", "xpu", "hpu", "mps"):
    os.environ["DS_ACCELERATOR"] = name
    with getattr(simulated, "simulate_" + name)():
        detection.reset_accelerator()
        acc, _ = detection.detect_accelerator()
        da.set_accelerator(acc)
        ds = da.get_accelerator()
        results["simulated:" + name] = {
            "handed_over": ds is acc,
            "device_name": ds.device_name(0),
            "backend": ds.communication_backend_name(),
            "device_count": ds.device_count(),
        }
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def contract_results(ds_python: str) -> dict[str, dict[str, object]]:
    """One DeepSpeed process checks every backend (DeepSpeed's import is the slow part)."""
    paths = [f"{cls.__module__}.{cls.__qualname__}" for cls in backend_classes()]
    code = _CHECK.replace("sys.argv[1:]", repr(paths))
    result = run_python(ds_python, code)
    parsed: dict[str, dict[str, object]] = json.loads(result.stdout.strip().splitlines()[-1])
    return parsed


@pytest.mark.parametrize(
    "path", [f"{cls.__module__}.{cls.__qualname__}" for cls in backend_classes()]
)
def test_backend_defines_every_deepspeed_abstract_method_and_is_accepted(
    path: str, contract_results: dict[str, dict[str, object]]
) -> None:
    assert contract_results[path] == {"abstract": "", "isinstance": True, "handed_over": True}


@pytest.mark.parametrize(
    ("name", "backend"),
    [("cuda", "nccl"), ("npu", "hccl"), ("xpu", None), ("hpu", "hccl"), ("mps", None)],
)
def test_simulated_runtime_answers_deepspeed_through_anyaccel(
    name: str, backend: str | None, contract_results: dict[str, dict[str, object]]
) -> None:
    result = contract_results[f"simulated:{name}"]
    assert result["handed_over"] is True
    assert str(result["device_name"]).split(":")[0] == name
    assert isinstance(result["device_count"], int) and result["device_count"] >= 1
    if backend is not None:
        assert result["backend"] == backend
