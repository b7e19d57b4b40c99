"""anyaccel's DeepSpeed-signature optimizers carry the attributes DeepSpeed's classes carry.

DeepSpeed's own ``unit/ops/adam/test_adamw.py::TestAdamConfigs`` reads ``adam_w_mode``; code
written against ``deepspeed.ops`` reads ``opt_id`` and ``ds_opt_<name>``. The attribute sets are
compared with DeepSpeed's sources (every ``self.<name> = ...`` in each class) where an
interpreter with DeepSpeed is configured (``ANYACCEL_DEEPSPEED_PYTHON``).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
from pathlib import Path

import pytest
import torch

from anyaccel.ops.adagrad import DeepSpeedCPUAdagrad
from anyaccel.ops.adam import DeepSpeedCPUAdam
from anyaccel.ops.cpu_features import cpu_vendor
from anyaccel.ops.lion import DeepSpeedCPULion

#: Ours, and where DeepSpeed defines the class of the same name.
CLASSES = {
    DeepSpeedCPUAdam: "ops/adam/cpu_adam.py",
    DeepSpeedCPUAdagrad: "ops/adagrad/cpu_adagrad.py",
    DeepSpeedCPULion: "ops/lion/cpu_lion.py",
}


def _params() -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.zeros(4))]


@pytest.mark.parametrize("adamw_mode", [True, False])
def test_deepspeed_cpu_adam_says_which_mode_it_runs_as_deepspeeds_does(adamw_mode: bool) -> None:
    optimizer = DeepSpeedCPUAdam(_params(), adamw_mode=adamw_mode)
    assert optimizer.adam_w_mode is adamw_mode
    assert optimizer.param_groups[0]["adamw_mode"] is adamw_mode


@pytest.mark.parametrize("cls", list(CLASSES))
def test_each_instance_gets_the_next_opt_id_of_its_class(cls: type[torch.optim.Optimizer]) -> None:
    first = cls(_params())
    second = cls(_params())
    assert second.opt_id == first.opt_id + 1  # type: ignore[attr-defined]
    assert cls.optimizer_id == second.opt_id + 1  # type: ignore[attr-defined]


def test_the_kernel_is_reachable_by_deepspeeds_names() -> None:
    adam, adagrad, lion = (cls(_params()) for cls in CLASSES)
    assert adam.ds_opt_adam is adam.kernel  # type: ignore[attr-defined]
    assert adagrad.ds_opt_adagrad is adagrad.kernel  # type: ignore[attr-defined]
    assert lion.ds_opt_lion is lion.kernel  # type: ignore[attr-defined]
    assert adam.cpu_vendor == lion.cpu_vendor == cpu_vendor()  # type: ignore[attr-defined]


def test_cpu_vendor_reads_the_vendor_id_in_lower_case(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu\n")
    assert cpu_vendor.__wrapped__(str(info)) == "genuineintel"


def _deepspeed_root() -> Path:
    """DeepSpeed's package folder, from ``ANYACCEL_DEEPSPEED_PYTHON`` or this interpreter."""
    python = os.environ.get("ANYACCEL_DEEPSPEED_PYTHON")
    if not python:
        spec = importlib.util.find_spec("deepspeed")
        if spec is None or spec.origin is None:
            pytest.skip(
                "DeepSpeed is not installed (set ANYACCEL_DEEPSPEED_PYTHON to one that has it)"
            )
        return Path(spec.origin).parent
    where = "import importlib.util; print(importlib.util.find_spec('deepspeed').origin)"
    found = subprocess.run([python, "-c", where], capture_output=True, text=True, check=True)
    return Path(found.stdout.strip().splitlines()[-1]).parent


def _assigned_on_self(source: str, class_name: str) -> set[str]:
    """Every ``self.<name> = ...`` in the class's methods."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for sub in ast.walk(node):
                targets = (
                    sub.targets
                    if isinstance(sub, ast.Assign)
                    else [sub.target]
                    if isinstance(sub, (ast.AugAssign, ast.AnnAssign))
                    else []
                )
                names |= {
                    t.attr
                    for t in targets
                    if isinstance(t, ast.Attribute)
                    and isinstance(t.value, ast.Name)
                    and t.value.id == "self"
                }
    return names


@pytest.mark.extras
@pytest.mark.parametrize("cls", list(CLASSES), ids=lambda cls: cls.__name__)
def test_every_attribute_deepspeeds_class_sets_exists_on_ours(
    cls: type[torch.optim.Optimizer],
) -> None:
    source = (_deepspeed_root() / CLASSES[cls]).read_text(encoding="utf-8")
    theirs = {name for name in _assigned_on_self(source, cls.__name__) if not name.startswith("_")}
    assert theirs, f"no attributes found for {cls.__name__} in DeepSpeed's {CLASSES[cls]}"
    ours = cls(_params())
    assert {name for name in theirs if not hasattr(ours, name)} == set()
    assert hasattr(cls, "optimizer_id")
