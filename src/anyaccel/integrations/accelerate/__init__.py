"""Make HF accelerate (and the transformers ``Trainer`` built on it) run on anyaccel's device.

accelerate and transformers pick their device and ``DistributedType`` themselves and have no
extension point; both read documented environment variables. :func:`install` sets those,
before their state exists, and changes nothing else::

    from anyaccel.integrations import accelerate as anyaccel_accelerate
    anyaccel_accelerate.install()       # before Accelerator() / TrainingArguments(...)
    accelerator = accelerate.Accelerator()

- the CPU: ``ACCELERATE_USE_CPU=true`` (what ``accelerate launch --cpu`` sets), read by every
  ``Accelerator()`` and ``TrainingArguments``. Under ``torchrun`` this makes a real
  ``MULTI_CPU`` job instead of N processes that each believe they are alone; there
  :func:`install` also joins the default group and builds accelerate's shared
  ``PartialState(cpu=True)``, which a bare ``PartialState()`` would build as one process.
- another device, one process: ``ACCELERATE_TORCH_DEVICE=<device>:<index>``, which both
  accelerate's ``PartialState`` and the last step of transformers' own device choice read.
- another device, several processes: accelerate must already pick it on its own; otherwise
  :func:`install` refuses, naming what accelerate does instead.

What accelerate and transformers will do is never worked out here: :func:`ask_frameworks`
asks them, in a child process (building their state would fix this process's), and keeps the
answer for the same settings. :func:`explain` shows those answers next to anyaccel's choice.
Importing this module imports neither torch, accelerate nor transformers and changes nothing.

Its parts, by job: :mod:`.refusals` (what it raises), :mod:`.versions` (the supported
range), :mod:`.asking` (the child process and its answers; ``framework_probe.py`` is the
child's program), :mod:`.plan` (the variables and the verdict on the answers),
:mod:`.installing` (:func:`install`, :func:`uninstall`) and :mod:`.explaining`
(:func:`explain`, the report section).
"""

from __future__ import annotations

from anyaccel.integrations.accelerate.asking import (
    FrameworkChoice,
    Scenario,
    ask_frameworks,
    launched_world_size,
)
from anyaccel.integrations.accelerate.explaining import (
    Explanation,
    explain,
    format_report_section,
    report_section,
    trainer_bf16,
)
from anyaccel.integrations.accelerate.installing import (
    Installation,
    install,
    installed,
    uninstall,
)
from anyaccel.integrations.accelerate.refusals import (
    AccelerateIntegrationError,
    AccelerateNotInstalledError,
    AccelerateStateConflictError,
    NoDistributedTypeError,
    TransformersDeviceWarning,
    UnsupportedVersionError,
)
from anyaccel.integrations.accelerate.versions import (
    SUPPORTED_VERSIONS,
    SupportedRange,
    check_versions,
)

__all__ = [
    "SUPPORTED_VERSIONS",
    "AccelerateIntegrationError",
    "AccelerateNotInstalledError",
    "AccelerateStateConflictError",
    "Explanation",
    "FrameworkChoice",
    "Installation",
    "NoDistributedTypeError",
    "Scenario",
    "SupportedRange",
    "TransformersDeviceWarning",
    "UnsupportedVersionError",
    "ask_frameworks",
    "check_versions",
    "explain",
    "format_report_section",
    "install",
    "installed",
    "launched_world_size",
    "report_section",
    "trainer_bf16",
    "uninstall",
]
