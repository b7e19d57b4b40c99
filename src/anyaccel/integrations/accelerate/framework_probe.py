"""The child program that asks accelerate and transformers what they will do in given settings.

:func:`anyaccel.integrations.accelerate.ask_frameworks` runs this file's source with
``python -c`` in a child process, so nothing is built in the asking process. It imports nothing
of anyaccel, but the emulated device when the asker has one: first it gives itself the asker's
PrivateUse1 device (:func:`_load_runtime`). Each question runs in a process of its own
(forked), so one answer's framework state never meets the next. A question asked under a
launcher's variables first gets a one-process gloo group (on a ``HashStore``): accelerate then
decides from those variables, as on every rank, and uses that group instead of waiting for
the other ranks.

Reads one JSON request from ``sys.argv[1]``: ``{"runtime": {...}, "scenarios": [{"name",
"set", "unset", "ask"}]}``; prints one JSON line: ``{name: {question: {"answer": ...} or
{"error": ...}}}``.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Mapping
from typing import Any

#: What accelerate reads to decide a job has several processes (besides ``LOCAL_RANK``).
#: Defined here, in the file the child runs, so the asking side and the child read one list.
WORLD_SIZE_ENVS = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def launched_world_size(environ: Mapping[str, str] | None = None) -> int:
    """How many processes the launcher started, from the variables accelerate reads (1 if none).

    ``LOCAL_RANK`` alone (``torchrun --nproc-per-node 1``) counts as a job of one process.
    """
    env = os.environ if environ is None else environ
    sizes = [env.get(name, "").strip() for name in WORLD_SIZE_ENVS]
    return max((int(size) for size in sizes if size.isdigit()), default=1)


def accelerate_launched(environ: Mapping[str, str] | None = None) -> bool:
    """Whether accelerate would treat this process as one rank of a launched job."""
    env = os.environ if environ is None else environ
    return env.get("LOCAL_RANK", "-1") != "-1" or launched_world_size(env) > 1


def _join_alone() -> None:
    """A one-process group, so that accelerate uses it instead of making the job's own."""
    import torch.distributed as dist

    c10d: Any = dist  # torch's stubs do not declare HashStore's export
    if c10d.is_available() and not c10d.is_initialized():
        c10d.init_process_group("gloo", store=c10d.HashStore(), rank=0, world_size=1)


def _framework(module: str) -> Any:
    """A module of accelerate or transformers (untyped packages: imported by name)."""
    return importlib.import_module(module)


def _accelerate() -> dict[str, Any]:
    state = _framework("accelerate").Accelerator().state
    return {
        "device": str(state.device),
        "distributed_type": state.distributed_type.name,
        "backend": state.backend,
    }


def _training_arguments(**arguments: Any) -> Any:
    with tempfile.TemporaryDirectory() as out:
        return _framework("transformers").TrainingArguments(
            output_dir=out, report_to="none", **arguments
        )


def _transformers() -> dict[str, Any]:
    arguments = _training_arguments()
    return {
        "device": str(arguments.device),
        "distributed_type": arguments.distributed_state.distributed_type.name,
        "backend": arguments.distributed_state.backend,
    }


def _fp16() -> dict[str, Any]:
    accelerator = _framework("accelerate").Accelerator(mixed_precision="fp16")
    scaler = accelerator.scaler
    return {
        "device": str(accelerator.device),
        "mixed_precision": accelerator.mixed_precision,
        "grad_scaler": None if scaler is None else type(scaler).__module__,
        "grad_scaler_enabled": scaler is not None and scaler.is_enabled(),
    }


def _device_map() -> list[str]:
    return [str(device) for device in _framework("accelerate.utils").get_max_memory()]


def _bf16() -> None:
    _training_arguments(bf16=True)


def _bf16_use_cpu() -> None:
    _training_arguments(bf16=True, use_cpu=True)


QUESTIONS: dict[str, Callable[[], Any]] = {
    "accelerate": _accelerate,
    "transformers": _transformers,
    "fp16": _fp16,
    "device_map": _device_map,
    "bf16=True": _bf16,
    "bf16=True, use_cpu=True": _bf16_use_cpu,
}


def _answer(scenario: dict[str, Any], question: str) -> dict[str, Any]:
    """One question in the scenario's settings, in this process: the answer or the error."""
    os.environ.update(scenario.get("set", {}))
    for name in scenario.get("unset", []):
        os.environ.pop(name, None)
    try:
        if accelerate_launched():
            _join_alone()
        return {"answer": QUESTIONS[question]()}
    except Exception as error:  # the frameworks' own refusal is the answer
        return {"error": f"{type(error).__name__}: {error}".strip().splitlines()[0]}


def _forked(scenario: dict[str, Any], question: str) -> dict[str, Any]:
    """:func:`_answer` in a forked process; in this one where the platform cannot fork.

    (Without ``fork``, the asking side sends one question per child.)
    """
    if not hasattr(os, "fork"):
        return _answer(scenario, question)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the forked process: answer, write, leave without running any cleanup
        os.close(read)
        with os.fdopen(write, "w") as out:
            json.dump(_answer(scenario, question), out)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        text = answer.read()
    _, status = os.waitpid(pid, 0)
    if not text:
        return {"error": f"the process asking {question!r} died (wait status {status})"}
    return dict(json.loads(text))


def _load_runtime(runtime: dict[str, Any]) -> None:
    """Give this process the asking process's PrivateUse1 device, before any question.

    The emulated device is installed from its spec (the build is cached); a vendor package
    that registers its device when imported is imported from where the asker found it. If
    neither leaves torch with the device's name (a runtime made by code this process cannot
    rerun), PrivateUse1 is renamed so that at least the device string parses.
    """
    name = runtime.get("privateuse1")
    if not name:
        return
    import torch

    emulated = runtime.get("emulated")
    if emulated:
        from anyaccel.testing.emulated import install  # the documented door

        install(emulated["device_type"], emulated["device_count"], emulated["memory_capacity"])
    found = runtime.get("import")
    if found:
        if found["path"] not in sys.path:
            sys.path.append(found["path"])
        importlib.import_module(found["module"])
    if torch._C._get_privateuse1_backend_name() == "privateuseone":
        from torch.utils.backend_registration import rename_privateuse1_backend

        rename_privateuse1_backend(name)


def main() -> None:
    warnings.simplefilter("ignore")
    request = json.loads(sys.argv[1])
    # the asker's import path (a script's folder, entries added at run time, a test runner's
    # pythonpath): the frameworks asked are the ones it would import, not another install
    sys.path[:] = request.get("sys_path", sys.path)
    _load_runtime(request.get("runtime", {}))
    for scenario in request["scenarios"]:  # imported once, before the forks share them
        if {"accelerate", "fp16", "device_map"} & set(scenario["ask"]):
            _framework("accelerate").Accelerator  # noqa: B018  (imports it)
        if {"transformers", "bf16=True"} & set(scenario["ask"]):
            _framework("transformers").TrainingArguments  # noqa: B018  (transformers is lazy)
    answers = {
        scenario["name"]: {question: _forked(scenario, question) for question in scenario["ask"]}
        for scenario in request["scenarios"]
    }
    print(json.dumps(answers))


if __name__ == "__main__":
    main()
