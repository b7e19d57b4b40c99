"""anyaccel: one accelerator API for PyTorch code, compatible with ``deepspeed.accelerator``.

``get_accelerator()`` detects the hardware once (``DS_ACCELERATOR`` forces a backend) and
returns the same object every time; importing anyaccel touches no device. The names below
are loaded on first use, so ``import anyaccel`` alone (as pytest does for the plugin) costs
nothing, not even ``import torch``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "Accelerator": "anyaccel.abstract",
    "DeepSpeedAccelerator": "anyaccel.abstract",
    "SUPPORTED_ACCELERATOR_LIST": "anyaccel.detection",
    "DetectionReport": "anyaccel.detection",
    "ProbeRecord": "anyaccel.detection",
    "detect_accelerator": "anyaccel.detection",
    "detection_report": "anyaccel.detection",
    "get_accelerator": "anyaccel.detection",
    "is_current_accelerator_supported": "anyaccel.detection",
    "reset_accelerator": "anyaccel.detection",
    "set_accelerator": "anyaccel.detection",
    "AcceleratorError": "anyaccel.errors",
    "AcceleratorUnavailableError": "anyaccel.errors",
    "CpuFallbackWarning": "anyaccel.errors",
    "InvalidAcceleratorError": "anyaccel.errors",
    "UnknownAcceleratorError": "anyaccel.errors",
    "UnsupportedFeatureError": "anyaccel.errors",
    "autocast_dtype": "anyaccel.precision",
    "grad_scaler_applies": "anyaccel.precision",
}

__all__ = [
    "SUPPORTED_ACCELERATOR_LIST",
    "Accelerator",
    "AcceleratorError",
    "AcceleratorUnavailableError",
    "CpuFallbackWarning",
    "DeepSpeedAccelerator",
    "DetectionReport",
    "InvalidAcceleratorError",
    "ProbeRecord",
    "UnknownAcceleratorError",
    "UnsupportedFeatureError",
    "__version__",
    "autocast_dtype",
    "detect_accelerator",
    "detection_report",
    "get_accelerator",
    "grad_scaler_applies",
    "is_current_accelerator_supported",
    "reset_accelerator",
    "set_accelerator",
]

if TYPE_CHECKING:
    from anyaccel.abstract import Accelerator, DeepSpeedAccelerator
    from anyaccel.detection import (
        SUPPORTED_ACCELERATOR_LIST,
        DetectionReport,
        ProbeRecord,
        detect_accelerator,
        detection_report,
        get_accelerator,
        is_current_accelerator_supported,
        reset_accelerator,
        set_accelerator,
    )
    from anyaccel.errors import (
        AcceleratorError,
        AcceleratorUnavailableError,
        CpuFallbackWarning,
        InvalidAcceleratorError,
        UnknownAcceleratorError,
        UnsupportedFeatureError,
    )


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use, then keep it here."""
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'anyaccel' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
