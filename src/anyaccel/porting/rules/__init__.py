"""Every rule ``anyaccel check`` applies and ``anyaccel port`` rewrites: one stable code each.

Each rule is one class in a module here (one module per family of codes, named after the codes
it holds: ``acc043_045_device_indexes.py`` holds ACC043-ACC045), holding its message, its
detection, its rewrite and its valid/invalid examples. Defining the class registers it; this
package imports every module here and instantiates what registered. Adding a rule:
docs/porting.md, "Adding a rule".
"""

from __future__ import annotations

import importlib
import pkgutil

from anyaccel.porting.rule import Invalid, PortingRule, registered_rules
from anyaccel.porting.rules.acc001_004_cuda_api import (
    CUDA_ALIASES,
    contract_names,
    portable_cuda_names,
)
from anyaccel.porting.rules.acc050_051_torch_accelerator import ACCELERATOR_PORTS

__all__ = [
    "ACCELERATOR_PORTS",
    "CALL_ORDER",
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

for _module in pkgutil.iter_modules(__path__):  # each rule module registers its rules
    importlib.import_module(f"{__name__}.{_module.name}")

#: Every rule by code, in code order.
RULES: dict[str, PortingRule] = {code: cls() for code, cls in registered_rules().items()}

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


#: The rules that rewrite calls, in the order they are asked (the first replacement wins).
CALL_ORDER: tuple[PortingRule, ...] = tuple(
    sorted(
        (unit for unit in RULES.values() if unit.call_rank is not None),
        key=lambda unit: unit.call_rank or 0,
    )
)


def classify(qualified: str) -> tuple[str, str] | None:
    """(code, the fix's ``attr``) for a dotted name like ``torch.cuda.synchronize``."""
    for unit in NAME_RULES:
        attr = unit.match_name(qualified)
        if attr is not None:
            return unit.code, attr
    return None
