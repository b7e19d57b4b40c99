"""The plan: which variables install() sets for a device, and whether the frameworks' answers
with them set are a job on that device (else the refusal that says why)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from anyaccel.integrations.accelerate.asking import (
    FrameworkChoice,
    Scenario,
    device_type_of,
    framework_choice,
    is_launched,
    launched_world_size,
)
from anyaccel.integrations.accelerate.refusals import (
    AccelerateIntegrationError,
    AccelerateStateConflictError,
    NoDistributedTypeError,
)
from anyaccel.probe import FORCE_ENV

__all__ = [
    "Plan",
    "after_install_scenario",
    "judge",
    "levers_for",
    "questions_for",
    "settings_text",
]

_USE_CPU = "ACCELERATE_USE_CPU"

_TORCH_DEVICE = "ACCELERATE_TORCH_DEVICE"


def _multi_device_types() -> dict[str, str]:
    """Device type -> accelerate's ``MULTI_*`` member name (``MULTI_GPU`` is ``cuda``)."""
    distributed_type = importlib.import_module("accelerate.utils").DistributedType
    table: dict[str, str] = {}
    for name in distributed_type.__members__:
        if name.startswith("MULTI_"):
            device = name.removeprefix("MULTI_").lower()
            table["cuda" if device == "gpu" else device] = name
    return table


def levers_for(device: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables :func:`install` sets for ``device``; raises if the user's say otherwise."""
    device_type = device_type_of(device)
    user_device = environ.get(_TORCH_DEVICE)
    if user_device and device_type_of(user_device) != device_type:
        raise AccelerateStateConflictError(
            f"{_TORCH_DEVICE}={user_device} is set, but anyaccel's device is {device!r}: "
            f"accelerate would follow the variable. Unset {_TORCH_DEVICE}, or set "
            f"{FORCE_ENV}={device_type_of(user_device)} so that anyaccel agrees."
        )
    if device_type == "cpu":
        return {_USE_CPU: "true"}
    if not is_launched(environ):
        return {_TORCH_DEVICE: device}
    return {}  # several processes: accelerate's own choice, checked by judge


def after_install_scenario(levers: Mapping[str, str], ask: tuple[str, ...]) -> Scenario:
    """The scenario "after install()": the levers set."""
    return Scenario("after install()", ask, tuple(sorted(levers.items())))


def questions_for(versions: Mapping[str, str | None]) -> tuple[str, ...]:
    """Who is asked what each does: accelerate, and transformers where it is installed."""
    return ("accelerate", "transformers") if versions.get("transformers") else ("accelerate",)


@dataclass(frozen=True)
class Plan:
    """What :func:`install` will set, and what accelerate and transformers said they then do."""

    device: str
    environment: dict[str, str]
    accelerate: FrameworkChoice
    transformers: FrameworkChoice | None


def judge(
    device: str,
    levers: dict[str, str],
    environ: Mapping[str, str],
    answers: Mapping[str, Mapping[str, Any]],
) -> Plan:
    """The plan, from what the frameworks answered with the levers set; raise if it fails."""
    device_type = device_type_of(device)
    world = launched_world_size(environ)
    how = "Accelerator() asked in a child process"
    after = framework_choice("accelerate", answers["accelerate"], environ, how)
    if isinstance(after, str):
        raise AccelerateIntegrationError(
            f"accelerate refuses to start with {settings_text(levers)}: {after}"
        )
    transformers: FrameworkChoice | str | None = None
    if "transformers" in answers:
        how = "TrainingArguments().device asked in a child process"
        transformers = framework_choice("transformers", answers["transformers"], environ, how)
    plan = Plan(device, levers, after, None if isinstance(transformers, str) else transformers)
    if device_type == "cpu" or not is_launched(environ):
        return plan
    multi_types = _multi_device_types()
    wanted = multi_types.get(device_type)
    if wanted is None:
        raise NoDistributedTypeError(
            f"this is a {world}-process job on anyaccel's {device_type!r} device, but accelerate "
            f"has no distributed type for {device_type!r} (its multi-process types are "
            f"{', '.join(sorted(multi_types.values()))}), so it would run every rank as "
            f"DistributedType.NO or on another device. Run one process with accelerate, or use "
            f"anyaccel.distributed with torch.distributed directly for this device."
        )
    if after.distributed_type != wanted or device_type_of(after.device) != device_type:
        launcher = (
            ""
            if environ.get("LOCAL_RANK", "-1") != "-1"
            else "launch with torchrun or accelerate launch (they set LOCAL_RANK), "
        )
        raise NoDistributedTypeError(
            f"this is a {world}-process job on anyaccel's {device_type!r} device, but accelerate "
            f"would run it as DistributedType.{after.distributed_type} on "
            f"{device_type_of(after.device)!r} (backend {after.backend}): accelerate has {wanted}, "
            f"yet it does not pick {device_type!r} here and it has no setting to choose a device "
            f"for a multi-process job. To fix it, {launcher}make {device_type!r} the only device "
            f"family visible, or set {FORCE_ENV}={device_type_of(after.device)} so that "
            f"anyaccel agrees."
        )
    return plan


def settings_text(levers: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in levers.items()) or "nothing set"
