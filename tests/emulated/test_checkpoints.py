"""A checkpoint saved on an emulated device, loaded where none is installed: the load error names
the setting that installs the device, and map_location="cpu"."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from anyaccel.emulated.state import torch_problem

SRC = Path(__file__).resolve().parents[2] / "src"


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter on these sources, with no accelerator forced."""
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "ANYACCEL_EMULATED")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )


#: The emulated device needs a torch whose PrivateUse1 interfaces its native core is built on.
needs_emulated_device = pytest.mark.skipif(torch_problem() is not None, reason=str(torch_problem()))

SAVE = textwrap.dedent(
    """
    import sys, torch
    from anyaccel.testing.emulated import install
    install(sys.argv[1] if len(sys.argv) > 1 else "emu", 2)
    torch.save({"w": torch.arange(3.0, device="{device}")}, {path!r})
    """
)

#: A process without the device: anyaccel detects its accelerator (the CPU), then loads.
LOAD = textwrap.dedent(
    """
    import torch
    from anyaccel import get_accelerator
    print("accelerator", get_accelerator().device_name())
    {load}
    """
)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One checkpoint per device: emu:1, and npu:0 (a vendor type the device stands in for)."""
    if torch_problem() is not None:
        pytest.skip(str(torch_problem()))
    paths = {}
    for device in ("emu:1", "npu:0"):
        path = tmp_path_factory.mktemp("ckpt") / f"{device.replace(':', '')}.pt"
        code = SAVE.replace("{device}", device).replace("{path!r}", repr(str(path)))
        code = code.replace('sys.argv[1] if len(sys.argv) > 1 else "emu"', repr(device[:3]))
        done = run_python(code)
        assert done.returncode == 0, done.stderr[-3000:]
        paths[device] = path
    return paths


@needs_emulated_device
@pytest.mark.parametrize(
    ("device", "setting"),
    [("emu:1", "ANYACCEL_EMULATED=emu:2"), ("npu:0", "ANYACCEL_EMULATED=npu:1")],
)
def test_loading_without_the_device_names_the_setting_that_installs_it(
    saved: dict[str, Path], device: str, setting: str
) -> None:
    done = run_python(LOAD.replace("{load}", f"torch.load({str(saved[device])!r})"))
    assert done.returncode != 0
    assert "EmulatedDeviceError" in done.stderr, done.stderr[-3000:]
    assert f"tensors saved on '{device}', a device this process does not have" in done.stderr
    assert f"DS_ACCELERATOR=emulated {setting}" in done.stderr
    assert "map_location='cpu'" in done.stderr
    assert ("vendor's npu hardware" in done.stderr) == device.startswith("npu")


@needs_emulated_device
def test_loading_onto_the_cpu_restores_the_values(saved: dict[str, Path]) -> None:
    done = run_python(
        LOAD.replace("{load}", f"print(torch.load({str(saved['emu:1'])!r}, map_location='cpu'))")
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "{'w': tensor([0., 1., 2.])}" in done.stdout


def test_another_unknown_location_keeps_torchs_own_error() -> None:
    from anyaccel.emulated.checkpoints import _explain

    assert _explain(object(), "zzdevice:0") is None
    assert _explain(object(), "not a location!") is None
