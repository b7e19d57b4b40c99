"""Asking accelerate and transformers what they will do, in one child process, once per setting.

Building their state would fix this process's, so :func:`ask_frameworks` runs
``framework_probe.py`` (beside this file) in a child with the settings to try, hands it this
process's PrivateUse1 device, and keeps the answers for the rest of the process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anyaccel.forksafe import ForkSafeLock
from anyaccel.integrations.accelerate.refusals import AccelerateIntegrationError

__all__ = [
    "LAUNCH_VARIABLES",
    "FrameworkChoice",
    "Scenario",
    "ask_frameworks",
    "device_type_of",
    "framework_choice",
    "is_launched",
    "launched_world_size",
]

#: What accelerate reads to decide a job has several processes (besides LOCAL_RANK).
_WORLD_SIZE_ENVS = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")

#: Launcher variables a question about one process must not see.
LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", *_WORLD_SIZE_ENVS)


def launched_world_size(environ: Mapping[str, str] | None = None) -> int:
    """How many processes the launcher started, from the variables accelerate reads (1 if none).

    ``LOCAL_RANK`` alone (``torchrun --nproc-per-node 1``) counts as a job of one process.
    """
    env = os.environ if environ is None else environ
    sizes = [int(env[name]) for name in _WORLD_SIZE_ENVS if env.get(name, "").strip().isdigit()]
    return max(sizes, default=1)


def is_launched(environ: Mapping[str, str]) -> bool:
    """Whether accelerate would treat this process as one rank of a launched job."""
    return environ.get("LOCAL_RANK", "-1") != "-1" or launched_world_size(environ) > 1


@dataclass(frozen=True)
class Scenario:
    """Questions for accelerate and transformers, asked with some variables set or unset.

    ``ask`` names questions of ``anyaccel.integrations.framework_probe``: ``"accelerate"``
    (``Accelerator().state``), ``"transformers"`` (``TrainingArguments().device``),
    ``"fp16"`` (``Accelerator(mixed_precision="fp16")``), ``"device_map"``
    (``accelerate.utils.get_max_memory()``), ``"bf16=True"`` and
    ``"bf16=True, use_cpu=True"`` (``TrainingArguments(...)``).
    """

    name: str
    ask: tuple[str, ...]
    set: tuple[tuple[str, str], ...] = ()
    unset: tuple[str, ...] = ()


#: Variables that change while the settings stay the same and that neither framework reads:
#: pytest names the running test in one, so a suite's tests would each ask again.
BOOKKEEPING_VARIABLES = frozenset({"PYTEST_CURRENT_TEST"})
#: Answers already given, by (environment, scenario): each is asked once per process.
_answers: dict[tuple[tuple[tuple[tuple[str, str], ...], str], Scenario], dict[str, Any]] = {}

_asking = ForkSafeLock()


def ask_frameworks(
    scenarios: tuple[Scenario, ...],
    environ: Mapping[str, str] | None = None,
    timeout: float = 300.0,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Each scenario's answers, from accelerate and transformers asked in one child process.

    The child runs with ``environ`` (default ``os.environ``) and each scenario's changes, and
    builds the frameworks' state there, never here. Every question's entry is
    ``{"answer": ...}`` or ``{"error": "<the framework's own refusal>"}``. Answers are kept for
    the rest of this process, per environment and scenario; only those not yet known are asked.
    Raises :class:`AccelerateIntegrationError` when the child cannot answer (it crashed or ran
    past ``timeout`` seconds), with the end of its output.
    """
    env = dict(os.environ if environ is None else environ)
    runtime = _device_runtime()
    settings = sorted((k, v) for k, v in env.items() if k not in BOOKKEEPING_VARIABLES)
    key = (tuple(settings), json.dumps(runtime, sort_keys=True))
    with _asking:
        missing = [scenario for scenario in scenarios if (key, scenario) not in _answers]
        # one child for all of them; where this platform cannot fork, one per question
        batches = (
            [missing]
            if hasattr(os, "fork") or not missing
            else [[Scenario(s.name, (q,), s.set, s.unset)] for s in missing for q in s.ask]
        )
        for batch in batches:
            if not batch:
                continue
            for name, answers in _ask_child(batch, env, runtime, timeout).items():
                scenario = next(s for s in missing if s.name == name)
                _answers.setdefault((key, scenario), {}).update(answers)
        return {scenario.name: _answers[(key, scenario)] for scenario in scenarios}


def _device_runtime() -> dict[str, Any]:
    """How the child gets the PrivateUse1 device this process has (nothing for torch's own).

    A vendor package without torch's backend autoload (or the generic backend's runtime)
    registers its device when the user's script imports it, and the emulated device when
    ``install()`` is called: a fresh child has neither, and ``torch.device("vpu:0")`` fails
    there. So the child is told the PrivateUse1 name, the package that provides
    ``torch.<name>`` (imported there, from where it was found here) and the emulated device's
    spec (installed there; its build is cached).
    """
    torch = sys.modules.get("torch")  # no torch imported: no device of its to describe
    getter = getattr(getattr(torch, "_C", None), "_get_privateuse1_backend_name", None)
    name = str(getter()) if getter is not None else "privateuseone"
    if torch is None or name == "privateuseone":
        return {}
    runtime: dict[str, Any] = {"privateuse1": name}
    module = getattr(torch, name, None)
    parts = str(getattr(module, "__name__", "")).split(".")
    for depth in range(len(parts), 0, -1):  # the deepest importable module of its name
        found = sys.modules.get(".".join(parts[:depth]))
        origin = getattr(getattr(found, "__spec__", None), "origin", None)
        if found is None or parts[0] == "__main__" or not origin or not Path(origin).is_file():
            continue
        root = Path(origin).parents[depth - (0 if origin.endswith("__init__.py") else 1)]
        runtime["import"] = {"module": ".".join(parts[:depth]), "path": str(root)}
        break
    from anyaccel.emulated.state import installed_spec

    spec = installed_spec()
    if spec is not None and spec.device_type == name:
        runtime["emulated"] = spec.to_dict()
    return runtime


def _ask_child(
    scenarios: list[Scenario], env: dict[str, str], runtime: dict[str, Any], timeout: float
) -> dict[str, dict[str, dict[str, Any]]]:
    """Run ``framework_probe`` once for ``scenarios``; its answers by scenario name."""
    source = Path(__file__).with_name("framework_probe.py").read_text(encoding="utf-8")
    request = {
        "sys_path": sys.path,  # the accelerate and transformers this process would import
        "runtime": runtime,
        "scenarios": [
            {"name": s.name, "ask": list(s.ask), "set": dict(s.set), "unset": list(s.unset)}
            for s in scenarios
        ],
    }
    try:
        done = subprocess.run(
            [sys.executable, "-c", source, json.dumps(request)],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as error:
        raise AccelerateIntegrationError(
            f"accelerate and transformers did not answer within {timeout} s in a child process"
        ) from error
    lines = done.stdout.strip().splitlines()
    try:
        answers: dict[str, dict[str, dict[str, Any]]] = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise AccelerateIntegrationError(
            f"accelerate and transformers could not be asked in a child process (exit "
            f"{done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}"
        ) from None
    return answers


@dataclass(frozen=True)
class FrameworkChoice:
    """What one framework will run on: device, distributed type, backend, process count."""

    framework: str
    version: str | None
    device: str
    distributed_type: str
    backend: str | None
    num_processes: int
    how: str


def framework_choice(
    framework: str, entry: Mapping[str, Any], environ: Mapping[str, str], how: str
) -> FrameworkChoice | str:
    """A question's answer as a :class:`FrameworkChoice`, or the framework's refusal."""
    if "error" in entry:
        return str(entry["error"])
    answer = entry["answer"]
    distributed = str(answer["distributed_type"])
    processes = 1 if distributed == "NO" else launched_world_size(environ)
    return FrameworkChoice(
        framework, None, str(answer["device"]), distributed, answer["backend"], processes, how
    )


def device_type_of(device: str) -> str:
    return device.partition(":")[0]
