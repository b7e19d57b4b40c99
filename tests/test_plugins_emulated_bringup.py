"""The bring-up plugin of docs/adding-hardware.md, installed as a real distribution, trains on zpu.

The package's files are the page's blocks (the ones whose marker names ``zpu_accel/...``), so the
documented recipe is what runs: a ``TorchModuleAccelerator`` subclass whose ``runtime_package``
is a stand-in that installs anyaccel's emulated device under the vendor's name.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.test_plugins_out_of_tree import venv_with_package

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "adding-hardware.md"

pytestmark = pytest.mark.slow

_TRAIN = """
import json, sys, warnings
warnings.simplefilter("ignore")
import torch
import anyaccel

acc = anyaccel.get_accelerator()
device = acc.current_device_name()
torch.manual_seed(0)
model = torch.nn.Linear(4, 2).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    loss = model(torch.randn(8, 4, device=device)).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
torch.save(model.state_dict(), sys.argv[1])
moved = torch.load(sys.argv[1], map_location=acc.device_name(1))
try:
    model(torch.randn(8, 4))  # a batch left on the host
    left_on_host = "passed"
except RuntimeError as error:
    left_on_host = str(error).splitlines()[0]
print(json.dumps({
    "class": type(acc).__name__, "how": anyaccel.detection_report().how, "device": device,
    "weight": str(model.weight.device), "loaded": str(moved["weight"].device),
    "count": acc.device_count(), "backend": acc.communication_backend_name(),
    "loss": loss.item(), "left_on_host": left_on_host,
}))
"""


def documented_files() -> dict[str, str]:
    """``{path in the package: source}`` from the page's blocks marked with a zpu_accel path."""
    text = PAGE.read_text(encoding="utf-8")
    files = {
        path: body
        for path, body in re.findall(
            r"<!-- not runnable: (zpu_accel/\S+\.py) of a plugin package[^\n]*-->\n"
            r"```python\n(.*?)```",
            text,
            re.S,
        )
    }
    (entry_points,) = re.findall(
        r'```toml\n(\[project\.entry-points\."anyaccel\.accelerators"\]\nzpu = .*?)```', text, re.S
    )
    files["pyproject.toml"] = (
        '[build-system]\nrequires = ["hatchling>=1.18"]\nbuild-backend = "hatchling.build"\n\n'
        '[project]\nname = "zpu-accel"\nversion = "0.1.0"\ndependencies = ["anyaccel"]\n\n'
        + entry_points
    )
    return files


def test_the_page_documents_both_modules_and_the_entry_point() -> None:
    files = documented_files()
    assert set(files) == {
        "zpu_accel/__init__.py",
        "zpu_accel/emulated_runtime.py",
        "pyproject.toml",
    }
    assert 'runtime_package = "zpu_accel.emulated_runtime"' in files["zpu_accel/__init__.py"]
    assert 'zpu = "zpu_accel:ZpuAccelerator"' in files["pyproject.toml"]


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv reusing this interpreter's packages, with the documented plugin pip-installed."""
    package = tmp_path_factory.mktemp("src") / "zpu-accel"
    for path, source in documented_files().items():
        (package / path).parent.mkdir(parents=True, exist_ok=True)
        (package / path).write_text(source)
    return venv_with_package(tmp_path_factory.mktemp("venv"), package, _env())


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DS_", "ANYACCEL_EMULATED"))}
    env["PYTHONPATH"] = str(REPO / "src")
    env.update(extra)
    return env


def test_the_documented_plugin_trains_and_checkpoints_on_its_emulated_device(
    venv: Path, tmp_path: Path
) -> None:
    done = subprocess.run(
        [str(venv), "-c", _TRAIN, str(tmp_path / "model.pt")],
        capture_output=True, text=True, timeout=600, env=_env(ZPU_EMULATED_DEVICES="2"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["class"], result["how"], result["count"]) == ("ZpuAccelerator", "detected", 2)
    assert (result["device"], result["weight"], result["loaded"]) == ("zpu:0", "zpu:0", "zpu:1")
    assert result["backend"] == "emuccl"
    assert "Expected all tensors to be on the same device" in result["left_on_host"]


def test_without_its_variable_the_plugin_is_passed_over(venv: Path) -> None:
    done = subprocess.run(
        [str(venv), "-c", "import anyaccel; print(anyaccel.get_accelerator()._name)"],
        capture_output=True, text=True, timeout=300, env=_env(DS_ACCELERATOR_UNSET="1"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.split()[-1] == "cpu"


def test_conformance_passes_on_the_documented_plugin(venv: Path) -> None:
    anyaccel = [str(venv), "-m", "anyaccel", "conformance", "zpu_accel:ZpuAccelerator"]
    done = subprocess.run(
        anyaccel, capture_output=True, text=True, timeout=900, env=_env(ZPU_EMULATED_DEVICES="2")
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "NO DEVICE" not in done.stdout
