"""How to install one of anyaccel's extras, in a line that works wherever anyaccel came from.

anyaccel is installed from a clone or a built wheel, not from a package index, so
``pip install "anyaccel[lightning]"`` finds nothing. An extra's own requirements, read from the
installed distribution's metadata, install anywhere; from a clone ``pip install -e ".[NAME]"``
does the same.
"""

from __future__ import annotations

import shlex

__all__ = ["EXTRAS_DISTRIBUTION", "extra_requirements", "install_hint"]

#: The distribution whose metadata lists the extras.
EXTRAS_DISTRIBUTION = "anyaccel"


def extra_requirements(extra: str, distribution: str = EXTRAS_DISTRIBUTION) -> list[str]:
    """The requirements ``extra`` adds, nested extras of ``distribution`` expanded, in order.

    :raises LookupError: ``distribution`` is not installed, or has no extra named ``extra``
        (the message lists the extras it has).
    """
    from importlib.metadata import PackageNotFoundError, metadata, requires

    from packaging.requirements import Requirement

    try:
        declared = requires(distribution) or []
        provided = metadata(distribution).get_all("Provides-Extra") or []
    except PackageNotFoundError as error:
        raise LookupError(f"{distribution} is not installed, so its extras are unknown") from error
    if extra not in provided:
        raise LookupError(
            f"{distribution} has no extra {extra!r}; its extras: {', '.join(sorted(provided))}"
        )
    found: list[str] = []
    pending, seen = [extra], set()
    while pending:
        current = pending.pop(0)
        if current in seen:
            continue
        seen.add(current)
        for line in declared:
            requirement = Requirement(line)
            if requirement.marker is None or not requirement.marker.evaluate({"extra": current}):
                continue
            if requirement.name == distribution:  # anyaccel[accelerate] inside [transformers]
                pending.extend(sorted(requirement.extras))
                continue
            text = str(Requirement(line.split(";")[0].strip()))
            if text not in found:
                found.append(text)
    return found


def install_hint(extra: str) -> str:
    """A ``pip install`` line for ``extra`` that works from a wheel and from a clone alike."""
    clone = f"from a clone of anyaccel: pip install -e '.[{extra}]'"
    try:
        requirements = extra_requirements(extra)
    except LookupError:
        return clone
    if not requirements:
        return clone
    return f"pip install {' '.join(shlex.quote(r) for r in requirements)} ({clone})"
