"""explain() and the ``anyaccel report`` section: anyaccel's device next to what accelerate and
transformers said they do, alone and after install(), with their limits on that device."""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from anyaccel.extras import install_hint
from anyaccel.integrations.accelerate.asking import (
    LAUNCH_VARIABLES,
    FrameworkChoice,
    Scenario,
    ask_frameworks,
    device_type_of,
    framework_choice,
    launched_world_size,
)
from anyaccel.integrations.accelerate.installing import (
    chosen_accelerator,
    environ_without,
    installed,
)
from anyaccel.integrations.accelerate.plan import (
    Plan,
    after_install_scenario,
    judge,
    levers_for,
    questions_for,
)
from anyaccel.integrations.accelerate.refusals import AccelerateIntegrationError
from anyaccel.integrations.accelerate.versions import check_versions

if TYPE_CHECKING:
    from anyaccel.abstract import Accelerator

__all__ = [
    "Explanation",
    "explain",
    "format_report_section",
    "report_section",
    "trainer_bf16",
]


@dataclass(frozen=True)
class Explanation:
    """anyaccel's device next to what accelerate and transformers said they do, and limits."""

    anyaccel_device: str
    anyaccel_backend: str
    world_size: int
    versions: dict[str, str | None]
    accelerate: FrameworkChoice | None = None
    transformers: FrameworkChoice | None = None
    after_install: FrameworkChoice | None = None
    transformers_after_install: FrameworkChoice | None = None
    install_refused: str | None = None
    limits: dict[str, str] = field(default_factory=dict)
    refusals: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for ``anyaccel report --json``)."""
        return asdict(self)

    def format(self) -> str:
        """Aligned text lines (for ``anyaccel report``)."""
        rows: list[tuple[str, str]] = [
            ("anyaccel", f"{self.anyaccel_device} (backend {self.anyaccel_backend})"),
            ("processes launched", str(self.world_size)),
        ]
        for label, choice in (
            ("accelerate on its own", self.accelerate),
            ("transformers on its own", self.transformers),
            ("accelerate after install()", self.after_install),
            ("transformers after install()", self.transformers_after_install),
        ):
            if choice is not None:
                rows.append((label, _format_choice(choice)))
        rows.extend((label, f"refused: {text}") for label, text in self.refusals.items())
        if self.install_refused is not None:
            rows.append(("install()", f"refused: {self.install_refused}"))
        rows.extend((f"limit: {name}", text) for name, text in self.limits.items())
        versions = ", ".join(
            f"{name} {version}" if version else f"{name} not installed ({install_hint(name)})"
            for name, version in self.versions.items()
        )
        rows.append(("versions", versions))
        width = max(len(label) for label, _ in rows)
        return "\n".join(f"{label:<{width}}  {text}" for label, text in rows)


def _format_choice(choice: FrameworkChoice) -> str:
    backend = f", backend {choice.backend}" if choice.backend else ""
    return (
        f"{choice.device} as DistributedType.{choice.distributed_type}, "
        f"{choice.num_processes} process(es){backend} ({choice.how})"
    )


def _limits(device_type: str, answers: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """accelerate's fp16 and ``device_map="auto"`` answers for ``device_type``, as text."""
    limits: dict[str, str] = {}
    fp16 = answers["fp16"]
    if "error" in fp16:
        limits["fp16"] = f"refused by accelerate on {device_type!r}: {fp16['error']}; use bf16"
    else:
        answer = fp16["answer"]
        scaler = (
            "no GradScaler"
            if answer["grad_scaler"] is None
            else f"a GradScaler from {answer['grad_scaler']}, "
            + ("enabled" if answer["grad_scaler_enabled"] else "disabled")
        )
        limits["fp16"] = f"accepted by accelerate on {answer['device']!r} ({scaler})"
    spread = answers["device_map"]
    if "error" in spread:
        limits['device_map="auto"'] = f"accelerate's get_max_memory() fails: {spread['error']}"
    else:
        devices = [str(device) for device in spread["answer"]]
        types = {device_type_of(device) if not device.isdigit() else "" for device in devices}
        verdict = (
            "uses this device"
            if device_type in types
            else f"never places weights on {device_type!r}"
        )
        limits['device_map="auto"'] = f"spreads over {', '.join(devices)} ({verdict})"
    return limits


#: ``TrainingArguments(bf16=True)`` alone, then with ``use_cpu=True``, in one process.
_BF16 = Scenario("bf16", ("bf16=True", "bf16=True, use_cpu=True"), unset=LAUNCH_VARIABLES)


def _bf16_line(answers: Mapping[str, Mapping[str, Any]], device_type: str) -> str:
    """The line that works for bf16; ``use_cpu=True`` only where the device is the CPU."""
    alone, with_cpu = answers["bf16=True"].get("error"), answers["bf16=True, use_cpu=True"]
    if alone is None:
        return "TrainingArguments(bf16=True) is accepted by transformers here"
    refused = f"TrainingArguments(bf16=True) is refused by transformers here ({alone})"
    if "error" not in with_cpu and device_type == "cpu":
        return f"{refused}; TrainingArguments(bf16=True, use_cpu=True) is accepted: use that line"
    if "error" not in with_cpu:  # elsewhere that line would move training off the device
        off = f"use_cpu=True would train on the CPU instead of {device_type!r}"
        return f"{refused}; {off}: use bf16=False"
    return f"{refused}; use bf16=False"


def trainer_bf16(
    environ: Mapping[str, str] | None = None,
    timeout: float = 300.0,
    device_type: str | None = None,
) -> str:
    """What the Trainer says to ``TrainingArguments(bf16=True)`` here, and the line that works.

    transformers is asked in a child process (:func:`ask_frameworks`; it validates the
    arguments as a user's script would), so nothing in this process is built or changed.
    ``use_cpu=True`` is named only where ``device_type`` (default: the selected accelerator's)
    is the CPU: elsewhere it would move training off the device.
    """
    try:
        answers = ask_frameworks((_BF16,), environ, timeout)[_BF16.name]
    except AccelerateIntegrationError as error:
        return f"transformers could not be asked ({error})"
    if device_type is None:
        device_type = device_type_of(chosen_accelerator(None, "trainer_bf16()").device_name())
    return _bf16_line(answers, device_type)


def explain(accelerator: Accelerator | None = None) -> Explanation:
    """anyaccel's choice next to what accelerate and transformers do, alone and after install().

    Asks them in one child process (:func:`ask_frameworks`, its answers kept for the same
    settings), so it builds no framework state here and changes nothing. Raises like
    :func:`check_versions` when accelerate is missing or unsupported,
    :class:`AccelerateIntegrationError` when the child cannot answer, and
    ``anyaccel.InvalidAcceleratorError`` for an ``accelerator`` that is no accelerator object.
    """
    accelerator = chosen_accelerator(accelerator, "explain()")
    versions = check_versions()
    device = accelerator.device_name()
    device_type = device_type_of(device)
    environ = environ_without(installed())  # "on its own" means without what install() set
    has_transformers = versions.get("transformers") is not None
    both = questions_for(versions)
    alone = Scenario("on its own", both)
    refused: str | None = None
    try:
        levers = levers_for(device, environ)
    except AccelerateIntegrationError as error:
        refused, levers = str(error), {}
    after = after_install_scenario(levers, both)
    limits_scenario = Scenario("limits", ("fp16", "device_map"), after.set)
    scenarios = (alone, after, limits_scenario, *((_BF16,) if has_transformers else ()))
    answers = ask_frameworks(scenarios, environ)
    refusals: dict[str, str] = {}
    own: dict[str, FrameworkChoice | None] = {}
    for framework in both:
        how = "asked in a child process, nothing set"
        choice = framework_choice(framework, answers[alone.name][framework], environ, how)
        if isinstance(choice, str):
            refusals[f"{framework} on its own"] = choice
            own[framework] = None
        else:
            own[framework] = FrameworkChoice(**{**asdict(choice), "version": versions[framework]})
    plan: Plan | None = None
    if refused is None:
        try:
            plan = judge(device, levers, environ, answers[after.name])
        except AccelerateIntegrationError as error:
            refused = str(error)
    limits = _limits(device_type, answers[limits_scenario.name])
    if has_transformers:
        limits["Trainer bf16"] = _bf16_line(answers[_BF16.name], device_type)
    return Explanation(
        anyaccel_device=device,
        anyaccel_backend=accelerator.communication_backend_name(),
        world_size=launched_world_size(environ),
        versions=versions,
        accelerate=own.get("accelerate"),
        transformers=own.get("transformers"),
        after_install=None if plan is None else plan.accelerate,
        transformers_after_install=None if plan is None else plan.transformers,
        install_refused=refused,
        limits=limits,
        refusals=refusals,
    )


def report_section(accelerator: Accelerator) -> dict[str, Any]:
    """The ``accelerate`` section of ``anyaccel report``: :func:`explain` as data, never raising."""
    if importlib.util.find_spec("accelerate") is None:
        return {
            "installed": False,
            "note": f"accelerate is not installed ({install_hint('accelerate')})",
        }
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return {"installed": True, **explain(accelerator).to_dict()}
    except Exception as error:  # the frameworks' own code: report it, do not die of it
        return {"installed": True, "error": f"{type(error).__name__}: {error}"}


def format_report_section(section: Mapping[str, Any]) -> str:
    """The text form of :func:`report_section`, under an ``accelerate / transformers`` heading."""
    heading = "accelerate / transformers"
    if not section.get("installed"):
        return f"{heading}\n  {section.get('note', '')}"
    if "error" in section:
        return f"{heading}\n  error: {section['error']}"
    fields = {k: v for k, v in section.items() if k != "installed"}
    for key in ("accelerate", "transformers", "after_install", "transformers_after_install"):
        if fields.get(key) is not None:
            fields[key] = FrameworkChoice(**fields[key])
    text = Explanation(**fields).format()
    return heading + "\n" + "\n".join(f"  {line}" for line in text.splitlines())
