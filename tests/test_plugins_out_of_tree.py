"""The out-of-tree example, pip-installed into a throwaway venv, is found with no user code."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "out_of_tree_accelerator"

pytestmark = pytest.mark.slow

# One process per board count (the runtime reads it once); each scenario resets and detects.
_QUERY = """
import json, os, sys, warnings
warnings.simplefilter("ignore")
import anyaccel
results = {}
for label, env in json.loads(sys.argv[1]).items():
    for key in ("DS_ACCELERATOR", "ANYACCEL_PLUGINS", "ACME_BRINGUP"):
        os.environ.pop(key, None)
    os.environ.update(env)
    anyaccel.reset_accelerator()
    try:
        acc = anyaccel.get_accelerator()
    except anyaccel.AcceleratorError as error:
        results[label] = {"error": type(error).__name__, "message": str(error)}
        continue
    report = anyaccel.detection_report()
    results[label] = {"class": type(acc).__qualname__, "name": acc._name,
                      "count": acc.device_count(), "how": report.how,
                      "rows": [[p.candidate, p.decision] for p in report.probes]}
print(json.dumps(results))
"""

_SCENARIOS = {
    "2": {
        "boards": {},
        "forced": {"DS_ACCELERATOR": "acme"},
        "not allowed": {"ANYACCEL_PLUGINS": "none"},
        "bring-up": {"DS_ACCELERATOR": "acme-bringup", "ACME_BRINGUP": "1"},
    },
    "0": {"no board": {}, "forced, no board": {"DS_ACCELERATOR": "acme"}},
}


def venv_with_package(root: Path, package: Path, env: dict[str, str]) -> Path:
    """A venv at ``root`` reusing this interpreter's packages (torch), with ``package``
    pip-installed as a real distribution (hatchling builds it, offline); its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    # This interpreter's packages (torch, pip, hatchling), whether it is itself a venv or not:
    # --system-site-packages would reach the base interpreter's, not a venv's.
    child_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    Path(child_site, "_parent_site.pth").write_text("\n".join(_site_packages()) + "\n")
    if importlib.util.find_spec("hatchling") is None:  # the packages' build backend
        pytest.fail('hatchling is missing: install the test extras, pip install -e ".[test]"')
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--no-cache-dir", str(package)],
        check=True, cwd=package, env=env, timeout=300,
    )  # fmt: skip
    return python


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv reusing this interpreter's packages (torch), with the example pip-installed."""
    source = tmp_path_factory.mktemp("src") / "acme-accel"  # build a copy, not the checkout
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    return venv_with_package(tmp_path_factory.mktemp("venv"), source, _env())


def _site_packages() -> list[str]:
    """Where this interpreter finds its installed packages."""
    paths = [*site.getsitepackages(), sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]
    if site.ENABLE_USER_SITE:
        paths.append(site.getusersitepackages())
    return list(dict.fromkeys(path for path in paths if os.path.isdir(path)))


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "ACME_BOARDS")}
    env["PYTHONPATH"] = str(REPO / "src")  # the anyaccel under test, whatever is installed
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def results(venv: Path) -> dict[str, dict[str, object]]:
    """What ``get_accelerator()`` gave in the venv, per scenario."""
    processes = [
        subprocess.Popen(
            [str(venv), "-c", _QUERY, json.dumps(scenarios)],
            env=_env(ACME_BOARDS=boards),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for boards, scenarios in _SCENARIOS.items()
    ]
    found: dict[str, dict[str, object]] = {}
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-3000:]
        found.update(json.loads(out.strip().splitlines()[-1]))
    return found


def test_boards_present_are_selected_automatically(results: dict[str, dict[str, object]]) -> None:
    result = results["boards"]
    assert (result["class"], result["name"], result["count"]) == ("AcmeAccelerator", "acme", 2)
    assert result["how"] == "detected"
    assert ["acme (plugin acme-accel)", "selected"] in result["rows"]


def test_no_board_falls_through_to_the_cpu(results: dict[str, dict[str, object]]) -> None:
    result = results["no board"]
    assert result["name"] == "cpu"
    assert ["acme (plugin acme-accel)", "passed over"] in result["rows"]


def test_ds_accelerator_forces_the_plugin(results: dict[str, dict[str, object]]) -> None:
    result = results["forced"]
    assert (result["name"], result["how"]) == ("acme", "DS_ACCELERATOR")


def test_forcing_it_without_a_board_says_so(results: dict[str, dict[str, object]]) -> None:
    result = results["forced, no board"]
    assert result["error"] == "AcceleratorUnavailableError"
    assert "no Acme board found" in str(result["message"])


def test_allow_list_keeps_the_plugin_out_and_the_generic_backend_steps_in(
    results: dict[str, dict[str, object]],
) -> None:
    result = results["not allowed"]
    assert (result["class"], result["name"]) == ("GenericAccelerator", "acme")
    assert ["generic (torch.accelerator)", "selected"] in result["rows"]
    assert not any("plugin" in row[0] for row in result["rows"])  # type: ignore[union-attr]


def test_the_deepspeed_style_bring_up_class_is_opt_in(
    results: dict[str, dict[str, object]],
) -> None:
    result = results["bring-up"]
    assert (result["class"], result["name"], result["how"]) == (
        "AcmeBringUp",
        "acme",
        "DS_ACCELERATOR",
    )
    # Without ACME_BRINGUP it stays out of the way: no board means the CPU, as before.
    assert ["acme-bringup (plugin acme-accel)", "passed over"] in results["no board"]["rows"]


def test_it_passes_the_conformance_kit(venv: Path) -> None:
    done = subprocess.run(
        [str(venv), "-m", "anyaccel", "conformance", "acme_accel:AcmeAccelerator"],
        env=_env(ACME_BOARDS="2"),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert "0 failed" in done.stdout
