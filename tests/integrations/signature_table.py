"""Describe an accelerator class's public members and compare them with DeepSpeed's.

Plain Python (no pytest), so a DeepSpeed interpreter can import it to describe DeepSpeed's
own classes in the same form.
"""

from __future__ import annotations

import inspect

Table = dict[str, str | tuple[str, ...]]


def describe_members(cls: type) -> Table:
    """Public members of ``cls``: ``'property'`` or its parameters as ``inspect`` prints them."""
    table: Table = {}
    for name in sorted(dir(cls)):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(cls, name)
        if isinstance(attr, property):
            table[name] = "property"
        elif callable(attr) or isinstance(attr, (staticmethod, classmethod)):
            params = list(inspect.signature(getattr(cls, name)).parameters.values())
            if not isinstance(attr, (staticmethod, classmethod)):
                params = params[1:]
            table[name] = tuple(_describe_parameter(p) for p in params)
    return table


def _describe_parameter(p: inspect.Parameter) -> str:
    """``name``, ``name=default``, ``*name``, ``**name``; ``kw:`` before keyword-only ones."""
    stars = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
    keyword_only = "kw:" if p.kind is p.KEYWORD_ONLY else ""
    default = "" if p.default is p.empty else f"={p.default!r}"
    return f"{keyword_only}{stars}{p.name}{default}"


def _split(entry: str) -> tuple[str, str | None]:
    """``'kw:device=\\'cpu\\''`` -> (``'kw:device'``, ``"'cpu'"``)."""
    name, _, default = entry.partition("=")
    return name, (default if _ else None)


def incompatibilities(expected: Table, cls: type) -> list[str]:
    """Where a call valid on DeepSpeed's member would fail, or mean otherwise, on ``cls``."""
    ours = describe_members(cls)
    problems = []
    for name, want in sorted(expected.items()):
        have = ours.get(name)
        if have is None:
            problems.append(f"{cls.__name__}.{name} is missing")
        elif want == "property" or have == "property":
            if want != have:
                problems.append(f"{cls.__name__}.{name}: {have} where DeepSpeed has {want}")
        else:
            problems.extend(_parameter_problems(f"{cls.__name__}.{name}", want, have))
    return problems


def _parameter_problems(where: str, want: tuple[str, ...], have: tuple[str, ...]) -> list[str]:
    problems = []
    for position, expected in enumerate(want):
        if position >= len(have):
            problems.append(f"{where} lacks parameter {expected!r} ({have})")
            continue
        want_name, want_default = _split(expected)
        have_name, have_default = _split(have[position])
        if want_name != have_name:
            problems.append(
                f"{where} parameter {position} is {have_name!r}, DeepSpeed {want_name!r}"
            )
        elif want_default is not None and want_default != have_default:
            problems.append(f"{where}({have_name}) defaults to {have_default}, not {want_default}")
    for extra in have[len(want) :]:
        if _split(extra)[1] is None and not extra.removeprefix("kw:").startswith("*"):
            problems.append(f"{where} adds parameter {extra!r} without a default")
    return problems
