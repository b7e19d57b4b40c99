"""Where each accelerator's op builders live and how a builder is found by class name.

Placeholder interface; the op-builder work fills it in.
"""

from __future__ import annotations


def builder_package(accelerator_name: str) -> str:
    """The import path of the package holding ``accelerator_name``'s op builders."""
    return f"anyaccel.ops.{accelerator_name.replace('.', '_')}"


def find_builder_class(package: str, class_name: str, accelerator_name: str) -> type | None:
    """The builder class named ``class_name`` in ``package``, or ``None`` if no op has that name."""
    return None
