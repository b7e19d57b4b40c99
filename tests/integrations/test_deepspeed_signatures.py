"""anyaccel's accelerators take every call DeepSpeed 0.19.8's take: same names, same order.

Checked against a static copy of DeepSpeed's signatures (always) and against the installed
DeepSpeed (when there is one). A parameter DeepSpeed gives a default must have the same
default here; anyaccel may add defaults where DeepSpeed has none, and extra parameters only
after DeepSpeed's, with defaults.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from pathlib import Path

import pytest

import anyaccel.backends
from anyaccel.abstract import Accelerator
from anyaccel.backends.cpu import CpuAccelerator

from .conftest import run_python
from .deepspeed_signatures import DEEPSPEED_ABC, DEEPSPEED_CPU, DEEPSPEED_VERSION
from .signature_table import incompatibilities


def backend_classes() -> list[type[Accelerator]]:
    """Every accelerator class anyaccel ships in ``anyaccel.backends``."""
    found: dict[str, type[Accelerator]] = {}
    for info in pkgutil.iter_modules(anyaccel.backends.__path__):
        module = importlib.import_module(f"anyaccel.backends.{info.name}")
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, Accelerator)
                and value.__module__ == module.__name__
            ):
                found[value.__qualname__] = value
    return [found[name] for name in sorted(found)]


def test_cpu_backend_takes_every_call_deepspeeds_cpu_accelerator_takes() -> None:
    assert incompatibilities(DEEPSPEED_CPU, CpuAccelerator) == []


@pytest.mark.parametrize("cls", backend_classes(), ids=lambda cls: cls.__name__)
def test_every_backend_takes_every_call_deepspeeds_abstract_class_declares(cls: type) -> None:
    expected = dict(DEEPSPEED_ABC)
    if cls is CpuAccelerator:  # DeepSpeed's CPU accelerator renames this one parameter
        expected["create_op_builder"] = DEEPSPEED_CPU["create_op_builder"]
    assert incompatibilities(expected, cls) == []


def test_the_check_catches_a_renamed_reordered_or_missing_parameter() -> None:
    class Drifted(CpuAccelerator):
        def pin_memory(self, tensor, align_bytes=1, make_copy=True, match_shape=True):  # type: ignore[no-untyped-def, override]
            return tensor

        def create_op_builder(self, class_name):  # type: ignore[no-untyped-def, override]
            return None

        def range_push(self, msg, color, domain=None, category=None):  # type: ignore[no-untyped-def, override]
            return None

    problems = incompatibilities(DEEPSPEED_CPU, Drifted)
    assert "Drifted.pin_memory parameter 1 is 'align_bytes', DeepSpeed 'make_copy'" in problems
    assert "Drifted.create_op_builder parameter 0 is 'class_name', DeepSpeed 'op_name'" in problems
    assert "Drifted.range_push parameter 1 is 'color', DeepSpeed 'domain'" in problems

    class Extended(CpuAccelerator):
        def range_push(self, msg, domain=None, category=None, *, color):  # type: ignore[no-untyped-def, override]
            return None

    assert incompatibilities(DEEPSPEED_CPU, Extended) == [
        "Extended.range_push adds parameter 'kw:color' without a default"
    ]


def test_static_copy_and_anyaccel_match_the_installed_deepspeed(ds_python: str) -> None:
    result = run_python(
        ds_python,
        """
        import json, warnings
        warnings.simplefilter('ignore')
        import deepspeed
        from deepspeed.accelerator.abstract_accelerator import DeepSpeedAccelerator
        from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator
        from signature_table import describe_members
        print(json.dumps([deepspeed.__version__, describe_members(DeepSpeedAccelerator),
                          describe_members(CPU_Accelerator)]))
        """,
        paths=(str(Path(__file__).parent),),
    )
    version, live_abc, live_cpu = json.loads(result.stdout.strip().splitlines()[-1])
    live_abc = {k: v if v == "property" else tuple(v) for k, v in live_abc.items()}
    live_cpu = {k: v if v == "property" else tuple(v) for k, v in live_cpu.items()}
    if version == DEEPSPEED_VERSION:
        assert (live_abc, live_cpu) == (DEEPSPEED_ABC, DEEPSPEED_CPU)
    assert incompatibilities(live_cpu, CpuAccelerator) == []
