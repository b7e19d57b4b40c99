"""The environment half of ``anyaccel report``: versions, hardware, packages, settings.

What a bug report needs and ``ds_report``/``accelerate env`` show: anyaccel, Python, the
platform, torch's build, the CPU, vendor packages (versions from their metadata, never
imported), devices, op capabilities, plugins and the environment variables that steer
anyaccel. Collecting it initialises no device and starts no subprocess; only the CPU
backend's devices are described unless ``devices=True`` (which may initialise them).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from anyaccel.probe import FORCE_ENV, resolve

__all__ = [
    "EXTRA_PACKAGES",
    "SCHEMA_VERSION",
    "environment_report",
    "format_environment",
    "format_markdown",
    "torch_build",
    "vendor_packages",
]

#: Bumped whenever a key of ``environment_report()`` is renamed or removed (adding keys keeps it).
SCHEMA_VERSION = 1

#: Packages besides the backends' runtimes that change how anyaccel behaves.
EXTRA_PACKAGES: tuple[str, ...] = (
    "deepspeed",
    "triton",
    "oneccl_bindings_for_pytorch",
    "intel_extension_for_deepspeed",
)

#: Environment variables that steer anyaccel besides ``ANYACCEL_*`` and visible-devices ones.
_STEERING_ENV = (FORCE_ENV, "TORCH_EXTENSIONS_DIR")


def _ask(question: Callable[[], Any]) -> Any:
    """The answer, or ``{"error": ...}``: one failing probe never sinks the report."""
    try:
        return question()
    except Exception as error:  # vendor and OS code we do not control
        return {"error": f"{type(error).__name__}: {error}"}


def torch_build() -> str:
    """``"CPU"``, ``"CUDA 12.4"`` or ``"ROCm 6.1"``: what the installed torch was built for."""
    import torch

    hip = getattr(torch.version, "hip", None)
    if hip:
        return f"ROCm {'.'.join(str(hip).split('.')[:2])}"
    cuda = getattr(torch.version, "cuda", None)
    if cuda:
        return f"CUDA {cuda}"
    return "CPU"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _platform_description() -> str:
    """Like ``platform.platform()``, without the ``uname -p`` subprocess it starts on Linux."""
    parts = [platform.system(), platform.release(), platform.machine()]
    libc, version = platform.libc_ver()
    if libc:
        parts.append(f"with-{libc}{version}")
    return "-".join(part for part in parts if part)


#: Where the NVIDIA kernel driver states its version (no subprocess, no device context).
NVIDIA_DRIVER_FILE = Path("/proc/driver/nvidia/version")
_DRIVER_VERSION = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)")


def gpu_toolkit(
    environ: Mapping[str, str] | None = None, driver_file: Path = NVIDIA_DRIVER_FILE
) -> dict[str, str | None]:
    """The NVIDIA driver and CUDA toolkit (nvcc) versions, read from files: no subprocess.

    The driver from ``/proc/driver/nvidia/version``; the toolkit from ``CUDA_HOME`` (or
    ``CUDA_PATH``, or the directory above ``nvcc`` on ``PATH``, or ``/usr/local/cuda``) and its
    ``version.json``. ``None`` where there is none.
    """
    environ = os.environ if environ is None else environ
    try:
        match = _DRIVER_VERSION.search(driver_file.read_text(errors="replace"))
    except OSError:
        match = None
    explicit = environ.get("CUDA_HOME") or environ.get("CUDA_PATH")
    nvcc = shutil.which("nvcc", path=environ.get("PATH"))
    candidates = (
        [Path(explicit)]
        if explicit
        else [*([Path(nvcc).resolve().parent.parent] if nvcc else []), Path("/usr/local/cuda")]
    )
    found: dict[str, str | None] = {"cuda_home": None, "nvcc": None}
    for home in candidates:
        version = _toolkit_version(home)
        if version is not None or (home / "bin" / "nvcc").is_file():
            found = {"cuda_home": str(home), "nvcc": version or "present, version unknown"}
            if version is not None:
                break
    return {"nvidia_driver": match.group(1) if match else None, **found}


def _toolkit_version(home: Path) -> str | None:
    """The CUDA toolkit's version from its files: ``version.json`` (installers since 11),
    ``version.txt`` (older ones) or the ``nvidia_cuda_nvcc`` wheel's ``dist-info`` name."""
    try:
        version = json.loads((home / "version.json").read_text())
        found = version.get("cuda_nvcc", version.get("cuda", {})).get("version")
        if found:
            return str(found)
    except (OSError, ValueError, AttributeError):
        pass
    try:
        match = re.search(r"CUDA Version\s+(\S+)", (home / "version.txt").read_text())
        if match:
            return match.group(1)
    except OSError:
        pass
    for info in sorted(home.glob("dist-info/nvidia_cuda_nvcc-*.dist-info")):
        return info.name.removeprefix("nvidia_cuda_nvcc-").removesuffix(".dist-info")
    return None


def _cpu() -> dict[str, Any]:
    import psutil

    from anyaccel.ops.cpu_features import cpu_features, selected_simd

    return {
        "model": _ask(_cpu_model),
        "simd": _ask(lambda: cpu_features().best_simd()),
        "simd_selected": _ask(selected_simd),
        "logical_cores": os.cpu_count(),
        "physical_cores": _ask(lambda: psutil.cpu_count(logical=False)),
        "ram_bytes": _ask(lambda: psutil.virtual_memory().total),
    }


def _builtin_classes() -> list[type[Any]]:
    """anyaccel's own accelerator classes (their modules import no vendor package)."""
    from anyaccel.registry import BUILTIN_CANDIDATES

    classes = []
    for candidate in BUILTIN_CANDIDATES:
        if not isinstance(candidate.accelerator, str):
            continue
        value = resolve(candidate.accelerator)
        if isinstance(value, type) and value not in classes:
            classes.append(value)
    return classes


@functools.cache
def _module_distributions() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


def _distribution_of(module: str) -> str | None:
    """The installed distribution providing top-level ``module``, found without importing it."""
    top = module.split(".")[0]
    if importlib.util.find_spec(top) is None:  # a top-level lookup imports nothing
        return None
    try:
        importlib.metadata.version(top)
        return top
    except importlib.metadata.PackageNotFoundError:
        names = _module_distributions().get(top, [])
        return names[0] if names else None


def vendor_packages() -> list[dict[str, str]]:
    """Every installed vendor runtime (from the backends' ``runtime_package``) and plugin."""
    modules: list[str] = []
    for cls in _builtin_classes():
        runtime = getattr(cls, "runtime_package", None)
        if isinstance(runtime, str) and runtime not in modules:
            modules.append(runtime)
    modules.extend(m for m in EXTRA_PACKAGES if m not in modules)
    found: list[dict[str, str]] = []
    for module in modules:
        distribution = _distribution_of(module)
        if distribution is not None:
            version = importlib.metadata.version(distribution)
            found.append({"module": module, "distribution": distribution, "version": version})
    from anyaccel.registry import plugin_statuses

    for status in plugin_statuses():
        if all(entry["distribution"] != status.distribution for entry in found):
            version = _ask(functools.partial(importlib.metadata.version, status.distribution))
            found.append(
                {"module": status.value, "distribution": status.distribution, "version": version}
            )
    return found


def _visible_devices_names(accelerator: Any) -> list[str]:
    names: list[str] = []
    for cls in _builtin_classes():
        names.extend(getattr(cls, "visible_devices_env_names", ()))
    if accelerator is not None:
        own = _ask(accelerator.visible_devices_envs)
        if isinstance(own, (list, tuple)):  # an error answer adds no variable names
            names.extend(own)
    return sorted({n for n in names if isinstance(n, str)})


def _environment_variables(accelerator: Any) -> dict[str, str | None]:
    names = {*_STEERING_ENV, *_visible_devices_names(accelerator)}
    names |= {name for name in os.environ if name.startswith("ANYACCEL_")}
    return {name: os.environ.get(name) for name in sorted(names)}


def _dtype_names(accelerator: Any) -> list[str]:
    return [str(d).replace("torch.", "") for d in accelerator.supported_dtypes()]


def _devices(accelerator: Any, devices: bool) -> list[dict[str, Any]]:
    """One row per device; asking a device runtime is opt-in, since it may initialise it."""
    if accelerator is None:
        return []
    name = accelerator.device_name()
    if name == "cpu":
        return [
            {
                "index": 0,
                "name": _ask(_cpu_model),
                "total_memory": _ask(accelerator.total_memory),
                "dtypes": _ask(lambda: _dtype_names(accelerator)),
            }
        ]
    count = _ask(accelerator.device_count)
    if not isinstance(count, int):
        return [{"index": None, "error": count}]
    rows: list[dict[str, Any]] = []
    for index in range(count):
        if not devices:
            rows.append({"index": index, "queried": False})
            continue
        module = getattr(__import__("torch"), name, None)
        get_name = getattr(module, "get_device_name", None)
        rows.append(
            {
                "index": index,
                "name": _ask(functools.partial(get_name, index)) if get_name else None,
                "total_memory": _ask(functools.partial(accelerator.total_memory, index)),
                "dtypes": _ask(lambda: _dtype_names(accelerator)),
            }
        )
    return rows


def _op_capabilities(accelerator: Any) -> list[dict[str, Any]]:
    from anyaccel.ops.capabilities import capabilities

    return [
        {"builder": row.builder, "op": row.op, "buildable": row.buildable, "reason": row.reason}
        for row in capabilities(accelerator)
    ]


def _plugins() -> list[dict[str, str]]:
    from anyaccel.registry import plugin_statuses

    return [
        {
            "name": s.name,
            "value": s.value,
            "distribution": s.distribution,
            "state": str(s.state),
            "detail": s.detail,
        }
        for s in plugin_statuses()
    ]


def environment_report(accelerator: Any = None, devices: bool = False) -> dict[str, Any]:
    """The environment as JSON-ready data (``schema_version`` first; see docs/detection.md)."""
    import torch

    import anyaccel

    return {
        "schema_version": SCHEMA_VERSION,
        "anyaccel": {"version": anyaccel.__version__, "path": os.path.dirname(anyaccel.__file__)},
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "platform": {
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
            "description": _platform_description(),
        },
        "torch": {
            "version": torch.__version__,
            "build": _ask(torch_build),
            "path": os.path.dirname(torch.__file__),
        },
        "cpu": _ask(_cpu),
        "gpu_toolkit": _ask(gpu_toolkit),
        "packages": _ask(vendor_packages),
        "devices": _ask(lambda: _devices(accelerator, devices)),
        "ops": _ask(lambda: _op_capabilities(accelerator)) if accelerator is not None else [],
        "plugins": _ask(_plugins),
        "environment_variables": _ask(lambda: _environment_variables(accelerator)),
    }


def _bytes(value: Any) -> str:
    if isinstance(value, int):
        return f"{value / 2**30:.1f} GiB"
    return str(value)


def _section_error(rows: list[tuple[str, str]], label: str, value: Any) -> bool:
    """Add an ``error: ...`` row when a section's question raised; True if it did."""
    if isinstance(value, dict) and set(value) == {"error"}:
        rows.append((label, f"error: {value['error']}"))
        return True
    return False


def _lines(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows for the text and Markdown forms; a failed section shows its error."""
    cpu = data["cpu"] if isinstance(data["cpu"], dict) else {}
    rows = [
        ("anyaccel", f"{data['anyaccel']['version']} ({data['anyaccel']['path']})"),
        ("python", f"{data['python']['version']} ({data['python']['executable']})"),
        ("platform", data["platform"]["description"]),
        ("torch", "{version}, {build} ({path})".format(**data["torch"])),
        ("cpu", f"{cpu.get('model')}, SIMD {cpu.get('simd')}, {cpu.get('logical_cores')} threads"),
        ("ram", _bytes(cpu.get("ram_bytes"))),
    ]
    toolkit = data.get("gpu_toolkit")
    if isinstance(toolkit, dict) and (toolkit.get("nvidia_driver") or toolkit.get("nvcc")):
        rows.append(
            (
                "nvidia",
                f"driver {toolkit.get('nvidia_driver') or 'none'}, "
                f"nvcc {toolkit.get('nvcc') or 'none'} ({toolkit.get('cuda_home') or '-'})",
            )
        )
    for label, key in (
        ("cpu", "cpu"),
        ("vendor packages", "packages"),
        ("devices", "devices"),
        ("ops", "ops"),
        ("plugins", "plugins"),
        ("environment variables", "environment_variables"),
    ):
        _section_error(rows, label, data[key])
    packages = data["packages"] if isinstance(data["packages"], list) else []
    rows.append(
        (
            "vendor packages",
            ", ".join(f"{p['distribution']} {p['version']}" for p in packages) or "none",
        )
    )
    for device in data["devices"] if isinstance(data["devices"], list) else []:
        if device.get("queried") is False:
            shown = "not queried (would initialise it; add --devices)"
        else:
            dtypes = device.get("dtypes")
            shown = (
                f"{device.get('name')}, {_bytes(device.get('total_memory'))}, "
                f"{', '.join(dtypes) if isinstance(dtypes, list) else dtypes}"
            )
        rows.append((f"device {device.get('index')}", shown))
    for op in data["ops"] if isinstance(data["ops"], list) else []:
        verdict = "buildable" if op["buildable"] else f"not buildable: {op['reason']}"
        rows.append((f"op {op['op']}", f"{op['builder']}, {verdict}"))
    for plugin in data["plugins"] if isinstance(data["plugins"], list) else []:
        detail = f" ({plugin['detail']})" if plugin["detail"] else ""
        rows.append((f"plugin {plugin['name']}", f"{plugin['state']}{detail}"))
    variables = data["environment_variables"]
    for name, value in variables.items() if isinstance(variables, dict) else ():
        rows.append((name, "(unset)" if value is None else value))
    return rows


def format_environment(data: dict[str, Any]) -> str:
    """The environment as aligned ``label  value`` lines."""
    rows = _lines(data)
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


def _cell(value: object) -> str:
    """``value`` as one Markdown table cell: ``|`` escaped, line breaks as ``<br>``."""
    text = str(value).replace("\\", "\\\\").replace("|", "\\|")
    return text.replace("\r\n", "<br>").replace("\r", "<br>").replace("\n", "<br>")


def _longest_backtick_run(text: str) -> int:
    longest = run = 0
    for character in text:
        run = run + 1 if character == "`" else 0
        longest = max(longest, run)
    return longest


def format_markdown(data: dict[str, Any], trace: str = "") -> str:
    """A block to paste into an issue: a table, then the detection trace if given."""
    body = ["| | |", "|---|---|"]
    body += [f"| {_cell(label)} | {_cell(value)} |" for label, value in _lines(data)]
    if trace:
        fence = "`" * max(3, _longest_backtick_run(trace) + 1)  # a ``` inside cannot end it
        body += ["", fence, trace, fence]
    return "\n".join(
        [
            "<details><summary>anyaccel report</summary>",
            "",
            *body,
            "",
            f"(schema {data['schema_version']})",
            "</details>",
        ]
    )
