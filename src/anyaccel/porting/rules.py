"""The rules ``anyaccel check`` applies and ``anyaccel port`` rewrites: one stable code each.

The set of ``torch.cuda`` names that port one-to-one comes from the ``Accelerator`` class in
``anyaccel/abstract.py``, read with ``ast`` so that checking never has to import torch.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "ACCELERATOR_PORTS",
    "CUDA_ALIASES",
    "RULES",
    "Rule",
    "contract_names",
    "portable_cuda_names",
    "rule",
]


class Rule(NamedTuple):
    """One kind of hardware-specific code: its code, a short name, and the fix."""

    code: str
    name: str
    message: str
    suggestion: str
    #: Whether ``anyaccel port`` rewrites it (in the common forms; see docs/porting.md).
    portable: bool


RULES: dict[str, Rule] = {
    r.code: r
    for r in (
        Rule(
            "ACC001",
            "cuda-contract-api",
            "`{name}` is CUDA-only; the accelerator contract has it",
            "get_accelerator().{attr}",
            True,
        ),
        Rule(
            "ACC002",
            "cuda-only-api",
            "`{name}` is CUDA-only and has no accelerator-agnostic equivalent",
            "guard it with `get_accelerator().device_name() == 'cuda'` or drop it",
            False,
        ),
        Rule(
            "ACC003",
            "cuda-current-device",
            "`{name}` returns a CUDA device index",
            "get_accelerator().current_device_name() as a device, .current_device() as an index",
            True,
        ),
        Rule(
            "ACC004",
            "cuda-default-generators",
            "`{name}` is the CUDA generator list",
            "get_accelerator().default_generator(i)",
            True,
        ),
        Rule(
            "ACC010",
            "cuda-amp-autocast",
            "`{name}` is autocast for CUDA only",
            "torch.autocast(device_type=get_accelerator().device_name(), "
            "dtype=autocast_dtype(torch.float16), ...)",
            True,
        ),
        Rule(
            "ACC011",
            "cuda-amp-grad-scaler",
            "`{name}` is the CUDA-only gradient scaler",
            "torch.amp.GradScaler(get_accelerator().device_name(), "
            "enabled=grad_scaler_applies(), ...)",
            True,
        ),
        Rule(
            "ACC012",
            "cuda-amp-other",
            "`{name}` is CUDA-only",
            "its torch.amp counterpart with device_type=get_accelerator().device_name()",
            False,
        ),
        Rule(
            "ACC020",
            "cuda-backend-flag",
            "`{name}` tunes the CUDA/cuDNN backend only and does nothing elsewhere",
            "set it only when get_accelerator().device_name() == 'cuda'",
            False,
        ),
        Rule(
            "ACC030",
            "tensor-cuda",
            "`.cuda()` moves to a CUDA device only",
            ".to(get_accelerator().current_device_name())",
            True,
        ),
        Rule(
            "ACC031",
            "tensor-is-cuda",
            "`.is_cuda` is false on every other accelerator",
            "get_accelerator().on_accelerator(tensor)",
            True,
        ),
        Rule(
            "ACC032",
            "tensor-pin-memory",
            "`.pin_memory()` fails where the build has no pinned-memory support",
            "get_accelerator().pin_memory(tensor)",
            True,
        ),
        Rule(
            "ACC033",
            "dataloader-pin-memory",
            "`DataLoader(pin_memory=True)` pins for CUDA; on a host without it torch warns and "
            "pins nothing, and on unified memory pinning buys nothing",
            "pin_memory=get_accelerator().pin_memory_applies()",
            True,
        ),
        Rule(
            "ACC040",
            "cuda-device-string",
            "the device string {name} names CUDA",
            "get_accelerator().device_name() or get_accelerator().device_name(i)",
            True,
        ),
        Rule(
            "ACC041",
            "nccl-backend",
            "the communication backend 'nccl' exists for CUDA only",
            "get_accelerator().communication_backend_name()",
            True,
        ),
        Rule(
            "ACC042",
            "cuda-visible-devices",
            "'CUDA_VISIBLE_DEVICES' selects CUDA devices only",
            "get_accelerator().visible_devices_envs() / set_visible_devices_envs(env, ids)",
            False,
        ),
        Rule(
            "ACC043",
            "int-device-ordinal",
            "the integer {name} is used as a device; without CUDA torch reads it as an "
            "accelerator that does not exist",
            "get_accelerator().device_name({attr})",
            True,
        ),
        Rule(
            "ACC044",
            "ddp-device-ids",
            "DistributedDataParallel's {name} names a device; torch refuses one for a CPU module",
            "{attr}",
            True,
        ),
        Rule(
            "ACC045",
            "device-count-as-process-count",
            "`{name}` counts processes here; it is 0 on a host without that accelerator",
            "anyaccel.distributed.local_process_count()",
            True,
        ),
        Rule(
            "ACC046",
            "lightning-cuda-accelerator",
            "Lightning's {name} runs on CUDA GPUs only; `devices=N` then counts GPUs",
            'accelerator="anyaccel" after `import anyaccel.integrations.lightning`; devices=N '
            "then counts the accelerator's devices (CPU processes on the CPU)",
            False,
        ),
        Rule(
            "ACC050",
            "torch-accelerator-api",
            "`{name}` is torch.accelerator's (torch >= 2.6): it finds no accelerator on a "
            "CPU host and is missing from older torch",
            "{attr}",
            True,
        ),
        Rule(
            "ACC051",
            "default-backend-for-device",
            "`{name}` picks torch's backend for a device (torch >= 2.6), not the accelerator's",
            "get_accelerator().communication_backend_name()",
            True,
        ),
    )
}

#: ``torch.cuda`` names whose anyaccel spelling differs: dotted name under torch.cuda -> method.
CUDA_ALIASES: dict[str, str] = {
    "nvtx.range_push": "range_push",
    "nvtx.range_pop": "range_pop",
}

#: ``torch.accelerator`` functions whose meaning the contract has: name -> contract method.
ACCELERATOR_PORTS: dict[str, str] = {
    "is_available": "is_available",
    "device_count": "device_count",
    "set_device_index": "set_device",
    "set_device_idx": "set_device",
    "current_device_index": "current_device",
    "current_device_idx": "current_device",
    "synchronize": "synchronize",
}

#: Contract names that ``torch.cuda`` uses for something else: ``torch.cuda.device`` is a
#: context manager, ``torch.cuda.amp`` and ``torch.cuda.random`` are modules.
_DIFFERENT_MEANING = frozenset({"device", "amp", "random"})


def rule(code: str) -> Rule:
    """The rule with ``code``; raises ``KeyError`` naming the known codes."""
    try:
        return RULES[code]
    except KeyError:
        raise KeyError(f"unknown rule code {code!r}; known: {', '.join(RULES)}") from None


@functools.cache
def contract_names() -> frozenset[str]:
    """Public method and property names of ``Accelerator``, read from ``abstract.py``'s source."""
    spec = importlib.util.find_spec("anyaccel.abstract")
    if spec is None or spec.origin is None:  # pragma: no cover - anyaccel is installed broken
        raise RuntimeError("cannot locate anyaccel/abstract.py; reinstall anyaccel")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Accelerator":
            return frozenset(
                item.name
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                and not item.name.startswith("_")
            )
    raise RuntimeError(f"no class Accelerator in {spec.origin}")  # pragma: no cover


@functools.cache
def portable_cuda_names() -> frozenset[str]:
    """``torch.cuda`` attributes that port to the same-named contract member."""
    return contract_names() - _DIFFERENT_MEANING
