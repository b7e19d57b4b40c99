"""What a rule's rewrite builds with and asks about, in libcst (the ``port`` extra).

Rules import this inside their ``rewrite_*``/``plan_*`` methods, so ``anyaccel check`` never
loads libcst. :class:`Rewriter` is the porter as a rule sees it.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Protocol

import libcst as cst
from libcst.helpers import get_full_name_for_node

from anyaccel.porting.analysis import IndexNames

__all__ = [
    "Rewriter",
    "accelerator",
    "accelerator_attr",
    "as_ast",
    "by_keyword",
    "called_method",
    "keyword",
    "last_name",
    "names_cuda",
    "names_no_device",
    "plain",
    "split_device",
]


class Rewriter(Protocol):
    """The porter of one chunk of a file, as a rule's rewrite sees it."""

    @property
    def aliases(self) -> dict[str, str]:
        """Local name -> the dotted name it was imported as."""
        ...

    def qualified(self, node: cst.CSTNode) -> str | None:
        """``node``'s dotted name with imports resolved (``None``: not a name)."""
        ...

    def index_names(self) -> IndexNames:
        """The file's names bound only to ints, and those declared as something else."""
        ...

    def rewrote(self, imported: cst.CSTNode | None = None) -> None:
        """Count one rewrite; ``imported``: the replaced use of an imported name (import may go)."""
        ...

    def needs(self, name: str) -> None:
        """The port wrote ``name``: ``torch``, or a helper of anyaccel(.distributed)."""
        ...

    def mark(self, code: str, key: object) -> None:
        """Remember ``key`` (a node's ``id``, a name) for rule ``code``, on the way down."""
        ...

    def is_marked(self, code: str, key: object) -> bool:
        """Whether rule ``code`` marked ``key``."""
        ...

    def claim(self, node: cst.CSTNode) -> None:
        """Leave ``node`` alone: a parent's rule decided what it is."""
        ...

    def is_device_position(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` is passed where a device goes (``device=``, ``.to(x)``...)."""
        ...


def as_ast(node: cst.BaseExpression) -> ast.expr | None:
    """``node`` as a stdlib expression, to ask the shared analysis about it."""
    try:
        return ast.parse(cst.Module([]).code_for_node(node).strip(), mode="eval").body
    except SyntaxError:  # a multi-line expression outside its brackets
        try:
            code = "(" + cst.Module([]).code_for_node(node) + ")"
            return ast.parse(code, mode="eval").body
        except SyntaxError:
            return None


def last_name(node: cst.BaseExpression) -> str | None:
    """``c`` of ``a.b.c``, ``x`` of ``x``; ``None`` for anything else."""
    name = get_full_name_for_node(node) if isinstance(node, cst.Name | cst.Attribute) else None
    return None if name is None else name.rsplit(".", 1)[-1]


def called_method(original: cst.Call, updated: cst.Call, porter: Rewriter) -> str | None:
    """``m`` of ``x.m(...)`` where ``x`` is not ``torch`` and no rewrite replaced ``x.m``."""
    func = original.func
    if (
        isinstance(func, cst.Attribute)
        and isinstance(updated.func, cst.Attribute)
        and porter.qualified(func.value) != "torch"
    ):
        return func.attr.value
    return None


def accelerator(method: str, *args: cst.Arg) -> cst.Call:
    """``get_accelerator().method(args)``."""
    return cst.Call(func=accelerator_attr(method), args=list(args))


def accelerator_attr(attr: str) -> cst.Attribute:
    """``get_accelerator().attr``."""
    getter = cst.Call(func=cst.Name("get_accelerator"))
    return cst.Attribute(value=getter, attr=cst.Name(attr))


def _equal() -> cst.AssignEqual:
    return cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
    )


def keyword(name: str, value: cst.BaseExpression) -> cst.Arg:
    """``name=value`` with no spaces around ``=``."""
    return cst.Arg(value, keyword=cst.Name(name), equal=_equal())


def by_keyword(args: Sequence[cst.Arg], parameters: tuple[str, ...]) -> list[cst.Arg] | None:
    """``args`` with positional ones named after ``parameters`` (``None``: ``*args``, too many)."""
    named = []
    for position, arg in enumerate(args):
        if arg.keyword is None:
            if arg.star or position >= len(parameters):
                return None
            arg = arg.with_changes(keyword=cst.Name(parameters[position]), equal=_equal())
        elif arg.star:
            return None
        named.append(arg)
    return named


def split_device(args: Sequence[cst.Arg], name: str) -> tuple[cst.Arg, list[cst.Arg]] | None:
    """The device argument (first, or ``name=``) and the others; ``None`` with ``*args``."""
    if any(a.star for a in args):
        return None
    for position, arg in enumerate(args):
        if (position == 0 and arg.keyword is None) or (
            arg.keyword is not None and arg.keyword.value == name
        ):
            return arg, [a for a in args if a is not arg]
    return None


def names_cuda(call: cst.Call, name: str) -> bool:
    """Whether ``call``'s device argument (first, or ``name=``) is the literal ``"cuda"``."""
    for position, arg in enumerate(call.args):
        if (position == 0 and arg.keyword is None) or (
            arg.keyword is not None and arg.keyword.value == name
        ):
            value = arg.value
            return isinstance(value, cst.SimpleString) and value.evaluated_value == "cuda"
    return False


def names_no_device(call: cst.Call, name: str) -> bool:
    """Whether ``call`` passes no device (no positional argument, no ``name=``, no ``**``)."""
    return not any(
        arg.keyword is None or arg.keyword.value == name or arg.star for arg in call.args
    )


def plain(arg: cst.Arg) -> cst.Arg:
    """``arg`` without its trailing comma (it is moved, so its old comma may not fit)."""
    return arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)
