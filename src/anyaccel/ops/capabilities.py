"""Which ops an accelerator can build, and why not when it cannot."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from anyaccel.ops import registry


class _HasOpBuilderDir(Protocol):
    """The part of an accelerator ``capabilities()`` needs."""

    _name: str

    def op_builder_dir(self) -> str: ...


@dataclass(frozen=True)
class OpCapability:
    """One op on one accelerator: its builder, whether it can be built here, and why not."""

    builder: str
    op: str
    accelerator: str
    buildable: bool
    reason: str


def capabilities(accelerator: _HasOpBuilderDir | str) -> list[OpCapability]:
    """Every known op and whether ``accelerator`` (an accelerator object or its name) can build it.

    Cheap: builder packages are scanned once per process, the CPU is probed once, and the
    tool checks are PATH lookups (no subprocess). For the current accelerator, pass
    ``anyaccel.get_accelerator()``; ``None`` raises ``TypeError`` saying so.
    """
    if accelerator is None:
        raise TypeError(
            "capabilities() needs the accelerator: pass anyaccel.get_accelerator() "
            "or a name such as 'cpu' or 'cuda'"
        )
    if isinstance(accelerator, str):
        name, package = accelerator, registry.builder_package(accelerator)
    else:
        name, package = accelerator._name, accelerator.op_builder_dir()
    rows: list[OpCapability] = []
    for class_name in registry.known_builder_names(package):
        builder_class = registry.find_builder_class(package, class_name, name)
        if builder_class is None:
            continue
        builder = builder_class()
        verdict = builder.compatibility()
        rows.append(OpCapability(class_name, builder.NAME, name, verdict.ok, verdict.reason))
    return rows


def format_capabilities(rows: list[OpCapability]) -> str:
    """``capabilities()`` as an aligned text table."""
    header = ("builder", "op", "buildable", "reason")
    table = [header] + [
        (row.builder, row.op, "yes" if row.buildable else "no", row.reason) for row in rows
    ]
    widths = [max(len(line[column]) for line in table) for column in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line[:3], widths, strict=True))
        + f"  {line[3]}"
        for line in table
    ).rstrip()
