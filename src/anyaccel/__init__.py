"""anyaccel: one accelerator API for PyTorch code, compatible with ``deepspeed.accelerator``.

``get_accelerator()`` detects the hardware once (``DS_ACCELERATOR`` forces a backend) and
returns the same object every time; importing anyaccel touches no device.
"""

from __future__ import annotations

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

__version__ = "0.1.0"

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
    "detect_accelerator",
    "detection_report",
    "get_accelerator",
    "is_current_accelerator_supported",
    "reset_accelerator",
    "set_accelerator",
]
