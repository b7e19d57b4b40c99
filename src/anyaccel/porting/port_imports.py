"""The imports a port needs: ``get_accelerator``, the helpers it wrote, ``torch``; dead ones go.

Only the chunks holding the imports concerned are parsed again (libcst's scope-based import
visitors made ``port`` quadratic in a file's size).
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar

import libcst as cst
from libcst.helpers import get_full_name_for_node

from anyaccel.porting.analysis import ImportedName

__all__ = ["WrittenNames", "fix_imports"]

#: Where the public helpers the port writes live: anyaccel.distributed, except these.
_HELPERS_MODULE = "anyaccel.distributed"
_HELPER_MODULES = {"autocast_dtype": "anyaccel", "grad_scaler_applies": "anyaccel"}


#: A chunk that starts with a line end already has its blank line.
_LINE_START = re.compile(r"\r\n|\r|\n")


class WrittenNames(NamedTuple):
    """What the rewrites of a file wrote that needs an import, and what they replaced."""

    used_torch: bool
    helpers: set[str]
    #: Imported local names a rewrite replaced a use of (their imports may now be dead).
    replaced_heads: set[str]


def _chunk_importing_from(chunks: Sequence[tuple[ast.stmt, ...]], module: str) -> int | None:
    """The first chunk with an absolute ``from module import names`` (not ``*``), or ``None``."""
    return next(
        (
            index
            for index, chunk in enumerate(chunks)
            for statement in chunk
            if isinstance(statement, ast.ImportFrom)
            and statement.module == module
            and not statement.level
            and statement.names[0].name != "*"
        ),
        None,
    )


def fix_imports(
    texts: list[str],
    chunks: Sequence[tuple[ast.stmt, ...]],
    config: cst.PartialParserConfig,
    total: WrittenNames,
    aliases: dict[str, str],
    imports: dict[str, ImportedName],
) -> None:
    """Add ``from anyaccel import get_accelerator`` (and ``import torch``); drop dead imports.

    Only the chunks holding the imports concerned are parsed again: libcst's scope-based
    import visitors made ``port`` quadratic in the file's size (minutes on a large file).
    """

    def edit(index: int, change: Callable[[cst.Module], cst.Module]) -> None:
        module = cst.parse_module(texts[index], config)
        texts[index] = change(module).code

    dead = _dead_imports("".join(texts), total, aliases, imports)
    if dead:
        for index, chunk in enumerate(chunks):
            if any(_imports_any(statement, dead) for statement in chunk):
                edit(index, lambda m: m.visit(_ImportRemover(dead)))
    wanted: list[str] = []
    if total.used_torch and aliases.get("torch") != "torch":
        wanted.append("import torch")
    wanted_helpers = sorted(name for name in total.helpers if name not in aliases)
    helpers = [
        n for n in wanted_helpers if _HELPER_MODULES.get(n, _HELPERS_MODULE) == _HELPERS_MODULE
    ]
    top = [n for n in wanted_helpers if _HELPER_MODULES.get(n) == "anyaccel"]
    if helpers:
        existing_helpers = _chunk_importing_from(chunks, _HELPERS_MODULE)
        if existing_helpers is not None:
            for name in helpers:
                edit(existing_helpers, functools.partial(_add_helper, name=name))
        else:
            wanted.append(f"from {_HELPERS_MODULE} import {', '.join(helpers)}")
    from_anyaccel = ([] if "get_accelerator" in aliases else ["get_accelerator"]) + top
    if from_anyaccel:  # a DeepSpeed-style import of get_accelerator is kept
        existing = _chunk_importing_from(chunks, "anyaccel")
        if existing is not None:
            for name in from_anyaccel:
                edit(existing, functools.partial(_add_from_anyaccel, name=name))
        else:
            wanted.append(f"from anyaccel import {', '.join(sorted(from_anyaccel))}")
    if not wanted:
        return
    new = [cst.parse_statement(line, config) for line in wanted]
    last_import = max(
        (
            index
            for index, chunk in enumerate(chunks)
            if any(isinstance(s, ast.Import | ast.ImportFrom) for s in chunk)
        ),
        default=None,
    )
    if last_import is None:  # at the top, after the docstring: libcst keeps the header comments
        edit(0, lambda m: _insert_imports(m, new))
        if not _docstring_only(chunks[0]):
            return
        following = 1  # the docstring's chunk ends with the imports: the next one needs a gap
    else:
        edit(last_import, lambda m: m.with_changes(body=[*m.body, *new]))
        following = last_import + 1
    if following < len(texts) and chunks[following]:
        head = texts[following]
        if not _LINE_START.match(head):  # code or a comment right below: one blank line first
            texts[following] = _newline(config) + head


def _docstring_only(chunk: tuple[ast.stmt, ...]) -> bool:
    """Whether ``chunk`` is the module docstring alone."""
    return (
        len(chunk) == 1
        and isinstance(chunk[0], ast.Expr)
        and isinstance(chunk[0].value, ast.Constant)
        and isinstance(chunk[0].value.value, str)
    )


def _newline(config: cst.PartialParserConfig) -> str:
    return str(config.default_newline or "\n")


def _add_helper(module: cst.Module, name: str) -> cst.Module:
    return _add_to_existing_from_import(module, _HELPERS_MODULE, name) or module


def _add_from_anyaccel(module: cst.Module, name: str) -> cst.Module:
    return _add_to_existing_from_import(module, "anyaccel", name) or module


def _imports_any(statement: ast.stmt, dead: set[ImportedName]) -> bool:
    for node in ast.walk(statement):
        if isinstance(node, ast.Import):
            if any((a.name, None, a.asname) in dead for a in node.names):
                return True
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and any((node.module, a.name, a.asname) in dead for a in node.names)
        ):
            return True
    return False


def _dead_imports(
    ported: str,
    total: WrittenNames,
    aliases: dict[str, str],
    imports: dict[str, ImportedName],
) -> set[ImportedName]:
    """The ``torch.cuda`` imports whose every use the port replaced."""
    candidates = {
        imports[head]
        for head in total.replaced_heads
        if head in imports and aliases[head].startswith("torch.cuda")
    }
    if not candidates:
        return set()
    used = _names_used(ported)
    return {c for c in candidates if (c[2] or c[1] or c[0]).split(".")[0] not in used}


def _names_used(code: str) -> set[str]:
    """Every name read, written or exported (``__all__``) outside import statements."""
    used: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            used.add(node.value)  # "__all__" entries, string annotations: kept, conservatively
    return used


class _ImportRemover(cst.CSTTransformer):
    """Drops the given ``(module, object, alias)`` imports; descends into statements only."""

    def __init__(self, dead: set[ImportedName]) -> None:
        super().__init__()
        self.dead = dead

    def on_visit(self, node: cst.CSTNode) -> bool:
        return not isinstance(node, cst.BaseExpression) and super().on_visit(node)

    def leave_Import(
        self, original_node: cst.Import, updated_node: cst.Import
    ) -> cst.Import | cst.RemovalSentinel:
        kept = [
            alias
            for alias in updated_node.names
            if (
                get_full_name_for_node(alias.name) or "",
                None,
                get_full_name_for_node(alias.asname.name) if alias.asname else None,
            )
            not in self.dead
        ]
        return _with_names(updated_node, kept)

    def leave_ImportFrom(
        self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom
    ) -> cst.ImportFrom | cst.RemovalSentinel:
        if updated_node.module is None or isinstance(updated_node.names, cst.ImportStar):
            return updated_node
        module = get_full_name_for_node(updated_node.module) or ""
        kept = [
            alias
            for alias in updated_node.names
            if (
                module,
                get_full_name_for_node(alias.name) or "",
                get_full_name_for_node(alias.asname.name) if alias.asname else None,
            )
            not in self.dead
        ]
        return _with_names(updated_node, kept)


_ImportNode = TypeVar("_ImportNode", cst.Import, cst.ImportFrom)


def _with_names(
    node: _ImportNode, kept: list[cst.ImportAlias]
) -> _ImportNode | cst.RemovalSentinel:
    """``node`` importing only ``kept`` (removed when empty; no dangling comma)."""
    if not kept:
        return cst.RemoveFromParent()
    if isinstance(node.names, cst.ImportStar) or len(kept) == len(node.names):
        return node
    kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return node.with_changes(names=kept)


def _add_to_existing_from_import(module: cst.Module, source: str, name: str) -> cst.Module | None:
    """``module`` with ``name`` added to its top-level ``from source import ...``, if it has one."""
    for index, statement in enumerate(module.body):
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for position, small in enumerate(statement.body):
            if (
                isinstance(small, cst.ImportFrom)
                and not small.relative
                and small.module is not None
                and get_full_name_for_node(small.module) == source
                and not isinstance(small.names, cst.ImportStar)
            ):
                names = list(small.names)
                if not isinstance(names[-1].comma, cst.Comma):
                    names[-1] = names[-1].with_changes(
                        comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                    )
                names.append(cst.ImportAlias(cst.Name(name)))
                body = list(statement.body)
                body[position] = small.with_changes(names=names)
                statements = list(module.body)
                statements[index] = statement.with_changes(body=body)
                return module.with_changes(body=statements)
    return None


def _insert_imports(module: cst.Module, new: Sequence[cst.BaseStatement]) -> cst.Module:
    """``new`` at the top of ``module``, after its docstring, then one blank line."""
    body = list(module.body)
    first = body[0] if body else None
    at = int(
        isinstance(first, cst.SimpleStatementLine)
        and len(first.body) == 1
        and isinstance(first.body[0], cst.Expr)
        and isinstance(first.body[0].value, cst.SimpleString | cst.ConcatenatedString)
    )
    after = body[at:]
    if after and not after[0].leading_lines:
        after[0] = after[0].with_changes(leading_lines=[cst.EmptyLine()])
    elif after and after[0].leading_lines[0].comment is not None:
        after[0] = after[0].with_changes(leading_lines=[cst.EmptyLine(), *after[0].leading_lines])
    return module.with_changes(body=[*body[:at], *new, *after])
