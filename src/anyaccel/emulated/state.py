"""The emulated device in this process: what was installed, and the rules for installing it.

The one holder of the installed spec and of the loaded native core. The rules live here once,
each with one message: the torch the native core needs (``MINIMUM_TORCH``), one emulated
device type per process (torch names PrivateUse1 once), and a PrivateUse1 that no other
runtime has taken. Importing this module loads nothing.
"""

from __future__ import annotations

from types import ModuleType

from anyaccel.emulated.spec import EmulatedSpec
from anyaccel.errors import AcceleratorError
from anyaccel.probe import FORCE_ENV, torch_release
from anyaccel.settings import AUTOLOAD_ENV

__all__ = [
    "MINIMUM_TORCH",
    "EmulatedDeviceError",
    "check_installable",
    "installed_spec",
    "native",
    "native_core_problem",
    "record_installed",
    "record_native",
    "torch_problem",
]

#: The oldest torch the native core is built and tested against: its PrivateUse1 hooks,
#: device guard and allocator interfaces changed release by release before it.
MINIMUM_TORCH = (2, 13)

_native: ModuleType | None = None
_installed: EmulatedSpec | None = None


class EmulatedDeviceError(AcceleratorError):
    """The emulated device cannot be installed here, or was installed differently."""


def installed_spec() -> EmulatedSpec | None:
    """The spec this process installed, or ``None`` before ``install``."""
    return _installed


def record_native(module: ModuleType) -> None:
    """Record the native core ``install`` loaded."""
    global _native
    _native = module


def record_installed(spec: EmulatedSpec) -> None:
    """Record the spec ``install`` made real (once torch's names for it are registered)."""
    global _installed
    _installed = spec


def native() -> ModuleType:
    """The loaded native core; ``EmulatedDeviceError`` before ``install``."""
    if _native is None:
        raise EmulatedDeviceError(
            "the emulated device is not installed in this process: call "
            f"anyaccel.testing.emulated.install() (or set {FORCE_ENV}=emulated) first"
        )
    return _native


def torch_problem() -> str | None:
    """Why this torch cannot run the emulated device (older than ``MINIMUM_TORCH``), or ``None``."""
    if torch_release() >= MINIMUM_TORCH:
        return None
    import torch

    return (
        f"the emulated device needs torch >= {MINIMUM_TORCH[0]}.{MINIMUM_TORCH[1]} (its "
        f"PrivateUse1 hooks and device guard interfaces); this is torch {torch.__version__}: "
        "upgrade torch to use it"
    )


def _privateuse1_problem(device_type: str) -> str | None:
    """Why PrivateUse1 cannot become ``device_type`` here (another runtime has it), or ``None``."""
    import torch

    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", device_type):
        return (
            f"torch's PrivateUse1 device already belongs to {current!r} in this process, so it "
            f"cannot become the emulated {device_type!r}; install the emulated device in a "
            f"process that has not loaded {current!r}'s runtime, or name it {current!r}"
        )
    if current == "privateuseone" and getattr(torch, device_type, None) is not None:
        return (
            f"torch.{device_type} already exists (another runtime registered it), so the emulated "
            f"device cannot take the name {device_type!r}; choose another device_type"
        )
    return None


def native_core_problem() -> str | None:
    """Why the native core cannot load in this process (an old torch, or PrivateUse1 taken by
    another runtime's package), or ``None``."""
    problem = torch_problem()
    if problem is not None or _installed is not None:
        return problem
    import torch

    current = torch._C._get_privateuse1_backend_name()
    if current == "privateuseone":
        return None
    return (
        f"torch's PrivateUse1 device belongs to {current!r} in this process (its runtime is "
        "loaded), so the emulated device's core cannot register there; build it in a process "
        f"without {current!r}'s runtime ({AUTOLOAD_ENV}=0)"
    )


def check_installable(spec: EmulatedSpec) -> bool:
    """Whether ``spec`` is installed already (``True``) or may be installed now (``False``).

    Raises ``EmulatedDeviceError`` when this process installed another spec (torch names
    PrivateUse1 once per process), when torch is older than ``MINIMUM_TORCH``, or when another
    runtime holds PrivateUse1 or the name.
    """
    if _installed is not None:
        if _installed != spec:
            raise EmulatedDeviceError(
                f"this process already installed the emulated device as {_installed}; it "
                f"cannot also be {spec} (torch names PrivateUse1 once per process): run "
                "the other configuration in its own process"
            )
        return True
    problem = torch_problem() or _privateuse1_problem(spec.device_type)
    if problem is not None:
        raise EmulatedDeviceError(problem)
    return False
