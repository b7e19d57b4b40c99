"""Every rule ``anyaccel check`` applies and ``anyaccel port`` rewrites: one stable code each.

Each rule is one class in a module here (one module per family of codes), holding its
message, its detection, its rewrite and its valid/invalid examples; this package lists them.
Adding a rule: docs/porting.md, "Adding a rule".
"""

from __future__ import annotations

from anyaccel.porting.rule import Invalid, PortingRule
from anyaccel.porting.rules.acc001_cuda_api import (
    CUDA_ALIASES,
    ContractApi,
    CudaOnlyApi,
    CurrentDevice,
    DefaultGenerators,
    contract_names,
    portable_cuda_names,
)
from anyaccel.porting.rules.acc010_amp import AmpOther, Autocast, GradScaler
from anyaccel.porting.rules.acc020_backend_flags import BackendFlag
from anyaccel.porting.rules.acc030_tensor import (
    DataLoaderPinMemory,
    TensorCuda,
    TensorIsCuda,
    TensorPinMemory,
)
from anyaccel.porting.rules.acc040_device_strings import (
    CudaVisibleDevices,
    DeviceString,
    NcclBackend,
)
from anyaccel.porting.rules.acc043_device_indexes import (
    DdpDeviceIds,
    DeviceCountAsProcessCount,
    IntDeviceOrdinal,
)
from anyaccel.porting.rules.acc046_lightning import LightningCudaAccelerator
from anyaccel.porting.rules.acc050_torch_accelerator import (
    ACCELERATOR_PORTS,
    DefaultBackendForDevice,
    TorchAcceleratorApi,
)

__all__ = [
    "ACCELERATOR_PORTS",
    "CUDA_ALIASES",
    "NAME_RULES",
    "RULES",
    "Invalid",
    "PortingRule",
    "Rule",
    "classify",
    "contract_names",
    "portable_cuda_names",
    "rule",
]

#: The unit every rule is (the name the rule record had before rules were classes).
Rule = PortingRule

#: Every rule by code, in code order.
RULES: dict[str, PortingRule] = {
    unit.code: unit
    for unit in sorted(
        (
            ContractApi(),
            CudaOnlyApi(),
            CurrentDevice(),
            DefaultGenerators(),
            Autocast(),
            GradScaler(),
            AmpOther(),
            BackendFlag(),
            TensorCuda(),
            TensorIsCuda(),
            TensorPinMemory(),
            DataLoaderPinMemory(),
            DeviceString(),
            NcclBackend(),
            CudaVisibleDevices(),
            IntDeviceOrdinal(),
            DdpDeviceIds(),
            DeviceCountAsProcessCount(),
            LightningCudaAccelerator(),
            TorchAcceleratorApi(),
            DefaultBackendForDevice(),
        ),
        key=lambda unit: unit.code,
    )
}

#: The rules that judge dotted names, asked in this order (catch-alls last).
NAME_RULES: tuple[PortingRule, ...] = tuple(
    sorted(
        (unit for unit in RULES.values() if type(unit).match_name is not PortingRule.match_name),
        key=lambda unit: unit.catch_all,
    )
)


def rule(code: str) -> PortingRule:
    """The rule with ``code``; raises ``KeyError`` naming the known codes."""
    try:
        return RULES[code]
    except KeyError:
        raise KeyError(f"unknown rule code {code!r}; known: {', '.join(RULES)}") from None


def classify(qualified: str) -> tuple[str, str] | None:
    """(code, the fix's ``attr``) for a dotted name like ``torch.cuda.synchronize``."""
    for unit in NAME_RULES:
        attr = unit.match_name(qualified)
        if attr is not None:
            return unit.code, attr
    return None
