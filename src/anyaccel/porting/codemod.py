"""``anyaccel port``'s engine: rewrite CUDA-only code into ``get_accelerator()`` calls with libcst.

The file is cut into chunks of top-level statements; the chunks that mention CUDA go through
:class:`~anyaccel.porting.porter.Porter`, which lets each rule rewrite what it reports, and
the imports are fixed once at the end. Formatting and comments are kept. Each rewrite happens
only where it is safe to decide from the source alone; what is left is found by running the
checker on the result, so the port and the check can never disagree. The result must parse,
or nothing is returned.
"""

from __future__ import annotations

import ast
import bisect
import difflib
import functools
import re
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar

import libcst as cst
from libcst.helpers import get_full_name_for_node

from anyaccel.errors import AnyaccelError
from anyaccel.porting.analysis import ImportedName, import_aliases
from anyaccel.porting.checker import (
    TRIGGER,
    Finding,
    check_source,
    could_match,
    index_names,
    trigger_lines,
    triggering_imports,
)
from anyaccel.porting.porter import Porter, configures_cuda
from anyaccel.porting.source_text import newline_of

__all__ = ["MAX_NESTING", "LineEdit", "PortError", "PortResult", "port_source"]

_T = TypeVar("_T")

#: The precision notes the port reports, by what it rewrote.
PRECISION_AUTOCAST = (
    "autocast runs in autocast_dtype({dtype}) (CUDA's autocast was float16 unless told): "
    "that dtype where the accelerator computes it (is_fp16_supported()/is_bf16_supported()), "
    "else the other half type"
)
PRECISION_SCALER = (
    "the GradScaler is enabled only where float16 autocast runs (grad_scaler_applies()); "
    "bfloat16 needs no loss scaling"
)
#: Where the public helpers the port writes live: anyaccel.distributed, except these.
_HELPERS_MODULE = "anyaccel.distributed"
_HELPER_MODULES = {"autocast_dtype": "anyaccel", "grad_scaler_applies": "anyaccel"}


class PortError(AnyaccelError, ValueError):
    """The file cannot be ported: it does not parse, or the port would not parse (a bug)."""


class LineEdit(NamedTuple):
    """Lines ``original[a_start:a_end]`` became ``ported[b_start:b_end]`` (0-based)."""

    a_start: int
    a_end: int
    b_start: int
    b_end: int


class PortResult(NamedTuple):
    """A ported file: the new text, how many rewrites, and what is left for the user."""

    path: str
    original: str
    ported: str
    rewrites: int
    left: list[Finding]
    #: The changed lines, in order; empty means "not known": ``diff()`` then compares all lines.
    edits: tuple[LineEdit, ...] = ()
    #: What the port chose where precision was at stake (autocast's dtype, the scaler), by line.
    precision: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether the port differs from the original."""
        return self.ported != self.original

    def diff(self) -> str:
        """The change as a unified diff (empty if nothing changed)."""
        if not self.changed:
            return ""
        original, ported = _lines(self.original), _lines(self.ported)
        edits = self.edits or _line_edits(original, ported, 0, 0)
        return _unified_diff(original, ported, edits, f"a/{self.path}", f"b/{self.path}")


def _line_edits(
    original: Sequence[str], ported: Sequence[str], a_offset: int, b_offset: int
) -> tuple[LineEdit, ...]:
    """The changed line ranges between two (small) texts, shifted by the offsets."""
    matcher = difflib.SequenceMatcher(None, original, ported, autojunk=False)
    return tuple(
        LineEdit(a1 + a_offset, a2 + a_offset, b1 + b_offset, b2 + b_offset)
        for tag, a1, a2, b1, b2 in matcher.get_opcodes()
        if tag != "equal"
    )


def _unified_diff(
    original: Sequence[str],
    ported: Sequence[str],
    edits: Sequence[LineEdit],
    from_name: str,
    to_name: str,
    context: int = 3,
) -> str:
    """A unified diff from known edits: no whole-file matching, so linear in the file."""
    if not edits:
        return ""
    groups = [[edits[0]]]
    for edit in edits[1:]:
        if edit.a_start - groups[-1][-1].a_end <= 2 * context:
            groups[-1].append(edit)
        else:
            groups.append([edit])
    out = [f"--- {from_name}\n", f"+++ {to_name}\n"]
    for group in groups:
        first, last = group[0], group[-1]
        a1 = max(first.a_start - context, 0)
        b1 = first.b_start - (first.a_start - a1)
        a2 = min(last.a_end + context, len(original))
        b2 = last.b_end + (a2 - last.a_end)
        out.append(f"@@ -{_hunk_range(a1, a2)} +{_hunk_range(b1, b2)} @@\n")
        at = a1
        for edit in group:
            out.extend(" " + line for line in original[at : edit.a_start])
            out.extend("-" + line for line in original[edit.a_start : edit.a_end])
            out.extend("+" + line for line in ported[edit.b_start : edit.b_end])
            at = edit.a_end
        out.extend(" " + line for line in original[at:a2])
    return "".join(out)


def _hunk_range(start: int, stop: int) -> str:
    """``start,length`` as unified diffs write it (1-based; a lone line has no length)."""
    length = stop - start
    if length == 1:
        return f"{start + 1}"
    return f"{start if length == 0 else start + 1},{length}"


def port_source(source: str, path: str = "<string>") -> PortResult:
    """``source`` ported, with the findings the port left (lines of the original source).

    Line endings (``\\r\\n``, mixed) are kept as they are outside the rewritten spans. The
    file is ported one top-level statement at a time, and only the statements that mention
    CUDA go through libcst, so time and memory grow with the file like ``check``'s.

    Raises ``PortError`` if ``source`` does not parse, nests an expression too deeply for
    the porter, or if the port would not parse.
    """
    if not could_match(source):
        return PortResult(path, source, source, 0, [])
    if "\r" in source and "\n" not in source:
        return _port_cr_only(source, path)
    tree = _parse(source, path)
    starts = _line_starts(source)
    aliases, imports = import_aliases(tree.body)
    chunks = _join_guardable(_chunks(tree, len(starts)), source, starts, aliases)
    config = cst.PartialParserConfig(
        default_indent=_indent_of(source, tree, starts), default_newline=newline_of(source)
    )
    names = functools.cache(lambda: index_names(tree))
    triggers = _port_trigger_lines(source, aliases)
    texts = [_span_text(source, starts, chunk.first, chunk.last) for chunk in chunks]
    total = _Totals()
    for index, chunk in enumerate(chunks):
        position = bisect.bisect_left(triggers, chunk.first)
        if not chunk.statements or position == len(triggers) or triggers[position] > chunk.last:
            continue  # nothing here that a rewrite could touch
        _refuse_deep_nesting(chunk.statements, path)
        porter = Porter(aliases, names)
        ported = _port_chunk(texts[index], config, porter, path, chunk.first)
        if porter.rewrites:
            texts[index] = ported
            total.add(porter)
    if total.rewrites:
        _fix_imports(texts, chunks, config, total, aliases, imports)
    text = "".join(texts)
    try:
        ast.parse(text)
    except SyntaxError as error:  # pragma: no cover - a bug in a rewrite; refuse, never write
        raise PortError(
            f"{path}: the port would not parse ({error.msg}, line {error.lineno}); "
            "the file is left as it was. Please report this with the file."
        ) from None
    mapping = _LineMap(source, chunks, texts)
    left = [f._replace(line=mapping.original_line(f.line)) for f in check_source(text, path)]
    edits = mapping.edits()
    precision = _precision_notes(text, edits, mapping, path)
    return PortResult(path, source, text, total.rewrites, left, edits, precision)


def _call_argument(line: str, start: int) -> str:
    """The text inside the parentheses that open at ``line[start - 1]`` (to their match)."""
    depth = 1
    for index in range(start, len(line)):
        depth += {"(": 1, ")": -1}.get(line[index], 0)
        if depth == 0:
            return line[start:index]
    return line[start:]


def _precision_notes(
    text: str, edits: Sequence[LineEdit], mapping: _LineMap, path: str
) -> tuple[str, ...]:
    """Each changed line where the port chose autocast's dtype or the scaler, as a note."""
    lines = text.splitlines()
    notes = []
    for edit in edits:
        for index in range(edit.b_start, min(edit.b_end, len(lines))):
            line, where = lines[index], f"{path}:{mapping.original_line(index + 1)}"
            for match in re.finditer(r"\bautocast_dtype\(", line):
                dtype = _call_argument(line, match.end())
                notes.append(f"{where}: {PRECISION_AUTOCAST.format(dtype=dtype)}")
            if re.search(r"\bgrad_scaler_applies\(", line):
                notes.append(f"{where}: {PRECISION_SCALER}")
    return tuple(notes)


def _port_cr_only(source: str, path: str) -> PortResult:
    """Port a file whose lines all end in a lone ``\r`` (classic Mac), which libcst misreads.

    Python reads a lone ``\r`` as a line end (inside strings too), so the port runs on the
    text with ``\n`` in its place and the result gets the ``\r`` back: lines, line numbers
    and edits stay the same.
    """
    result = port_source(source.replace("\r", "\n"), path)
    return result._replace(original=source, ported=result.ported.replace("\n", "\r"))


#: Deeper expressions than this make libcst's parser take minutes (it grows ~cubically).
MAX_NESTING = 500


class _Chunk(NamedTuple):
    """Consecutive lines (1-based, inclusive) holding whole top-level statements."""

    first: int
    last: int
    statements: tuple[ast.stmt, ...]


class _Totals:
    """What the ports of all chunks did, for fixing the imports once."""

    def __init__(self) -> None:
        self.rewrites = 0
        self.used_torch = False
        self.replaced_heads: set[str] = set()
        self.helpers: set[str] = set()

    def add(self, porter: Porter) -> None:
        self.rewrites += porter.rewrites
        self.used_torch |= porter.used_torch
        self.replaced_heads |= porter.replaced_heads
        self.helpers |= porter.helpers


def _parse(source: str, path: str) -> ast.Module:
    """``source``'s tree; every way it can fail is a ``PortError`` naming the file."""
    try:
        return ast.parse(source)
    except SyntaxError as error:
        where = f"{path}:{error.lineno}:{error.offset}"
        raise PortError(f"{where}: cannot parse: {error.msg}") from None
    except ValueError as error:  # NUL bytes
        raise PortError(f"{path}: cannot parse: {error}") from None
    except (RecursionError, MemoryError):
        raise PortError(
            f"{path}: cannot parse: an expression is nested too deeply for Python's parser; "
            "split it into smaller expressions"
        ) from None


def _guarded(step: Callable[[], _T], path: str, line: int) -> _T:
    """``step()``, with libcst's recursion or memory exhaustion as a ``PortError``."""
    try:
        return step()
    except (RecursionError, MemoryError):
        raise PortError(
            f"{path}:{line}: the statement here is nested too deeply for the porter; "
            "port it by hand (the file is left as it was)"
        ) from None
    except cst.ParserSyntaxError:
        raise
    except Exception as error:  # a rewrite libcst refuses: a bug of ours, one file's error
        raise PortError(
            f"{path}:{line}: the porter failed on the statement here ({type(error).__name__}: "
            f"{error}); the file is left as it was. Please report this with the file."
        ) from None


def _port_chunk(
    text: str, config: cst.PartialParserConfig, porter: Porter, path: str, line: int
) -> str:
    """One chunk's text ported by ``porter``."""
    module = _parse_chunk(text, config, path, line)
    return _guarded(lambda: module.visit(porter).code, path, line)


def _parse_chunk(text: str, config: cst.PartialParserConfig, path: str, line: int) -> cst.Module:
    try:
        return _guarded(lambda: cst.parse_module(text, config), path, line)
    except cst.ParserSyntaxError as error:
        raise PortError(
            f"{path}:{line + error.raw_line - 1}:{error.raw_column}: libcst cannot parse this "
            f"file ({error.message}); a newer libcst may: pip install -U libcst"
        ) from None


def _refuse_deep_nesting(statements: Sequence[ast.stmt], path: str) -> None:
    """Raise ``PortError`` past ``MAX_NESTING`` nested expressions (libcst would hang)."""
    stack: list[tuple[ast.AST, int]] = [(s, 0) for s in statements]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, ast.BoolOp):
            depth += len(node.values) - 1  # libcst nests what ast keeps flat
        elif isinstance(node, ast.Compare):
            depth += len(node.ops)
        elif isinstance(node, ast.expr):
            depth += 1
        if depth > MAX_NESTING:
            raise PortError(
                f"{path}:{getattr(node, 'lineno', '?')}: an expression nested more than "
                f"{MAX_NESTING} levels deep; the porter would take minutes on it: port this "
                "file by hand or split the expression (the file is left as it was)"
            )
        stack.extend((child, depth) for child in ast.iter_child_nodes(node))


_LINE_END = re.compile(r"\r\n|\r|\n")


def _line_starts(text: str) -> list[int]:
    """Offset of each line's start (line ends as Python counts them: \\n, \\r\\n, \\r)."""
    return [0, *(match.end() for match in _LINE_END.finditer(text))]


def _lines(text: str) -> list[str]:
    """``text`` cut into lines, each with its own ending (form feeds are not line ends)."""
    starts = _line_starts(text)
    ends = [*starts[1:], len(text)]
    return [text[a:b] for a, b in zip(starts, ends, strict=True) if b > a]


def _span_text(source: str, starts: list[int], first: int, last: int) -> str:
    begin = starts[first - 1] if first - 1 < len(starts) else len(source)
    end = starts[last] if last < len(starts) else len(source)
    return source[begin:end]


def _chunks(tree: ast.Module, line_count: int) -> list[_Chunk]:
    """The file as chunks of whole top-level statements (comments above go with them)."""
    chunks: list[_Chunk] = []
    previous_last = 0
    for statement in tree.body:
        first = min([statement.lineno, *(d.lineno for d in _decorators(statement))])
        last = statement.end_lineno or statement.lineno
        if chunks and first <= previous_last:  # "a = 1; b = 2": one line, one chunk
            merged = chunks.pop()
            chunks.append(_Chunk(merged.first, last, (*merged.statements, statement)))
        else:
            chunks.append(_Chunk(previous_last + 1, last, (statement,)))
        previous_last = last
    if previous_last < line_count:
        chunks.append(_Chunk(previous_last + 1, line_count, ()))  # trailing comments
    return chunks


def _join_guardable(
    chunks: list[_Chunk], source: str, starts: list[int], aliases: dict[str, str]
) -> list[_Chunk]:
    """Adjacent top-level statements that only configure CUDA in one chunk (one guard)."""
    joined: list[_Chunk] = []
    for chunk in chunks:
        previous = joined[-1] if joined else None
        if (
            previous is not None
            and previous.statements
            and chunk.statements
            and all(configures_cuda(s, aliases) for s in (*previous.statements, *chunk.statements))
            and not _has_blank_line(_span_text(source, starts, chunk.first, chunk.last))
        ):
            joined[-1] = _Chunk(
                previous.first, chunk.last, (*previous.statements, *chunk.statements)
            )
        else:
            joined.append(chunk)
    return joined


def _has_blank_line(text: str) -> bool:
    return any(not line.strip() for line in _lines(text))


def _decorators(statement: ast.stmt) -> list[ast.expr]:
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return statement.decorator_list
    return []


def _indent_of(source: str, tree: ast.Module, starts: list[int]) -> str:
    """The file's first block indentation (what libcst would use for new blocks)."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.stmt) and isinstance(body, list) and body:
            inner = body[0]
            if inner.lineno != node.lineno and inner.col_offset:
                line = _span_text(source, starts, inner.lineno, inner.lineno)
                indent = line[: len(line) - len(line.lstrip(" \t"))]
                if indent:
                    return indent
            break
    return "    "


def _port_trigger_lines(source: str, aliases: dict[str, str]) -> list[int]:
    """Lines a rewrite may touch: trigger words, and names imported from ``torch.cuda``."""
    lines = trigger_lines(source, TRIGGER)
    imported = triggering_imports(aliases)
    if imported:
        words = re.compile(r"\b(?:" + "|".join(map(re.escape, imported)) + r")\b")
        lines = sorted({*lines, *trigger_lines(source, words)})
    return lines


def _fix_imports(
    texts: list[str],
    chunks: list[_Chunk],
    config: cst.PartialParserConfig,
    total: _Totals,
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
            if any(_imports_any(statement, dead) for statement in chunk.statements):
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
        existing_helpers = next(
            (
                index
                for index, chunk in enumerate(chunks)
                for statement in chunk.statements
                if isinstance(statement, ast.ImportFrom)
                and statement.module == _HELPERS_MODULE
                and not statement.level
                and statement.names[0].name != "*"
            ),
            None,
        )
        if existing_helpers is not None:
            for name in helpers:
                edit(existing_helpers, functools.partial(_add_helper, name=name))
        else:
            wanted.append(f"from {_HELPERS_MODULE} import {', '.join(helpers)}")
    from_anyaccel = ([] if "get_accelerator" in aliases else ["get_accelerator"]) + top
    if from_anyaccel:  # a DeepSpeed-style import of get_accelerator is kept
        existing = next(
            (
                index
                for index, chunk in enumerate(chunks)
                for statement in chunk.statements
                if isinstance(statement, ast.ImportFrom)
                and statement.module == "anyaccel"
                and not statement.level
                and statement.names[0].name != "*"
            ),
            None,
        )
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
            if any(isinstance(s, ast.Import | ast.ImportFrom) for s in chunk.statements)
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
    if following < len(texts) and chunks[following].statements:
        head = texts[following]
        if not _LINE_END.match(head):  # code or a comment right below: one blank line first
            texts[following] = _newline(config) + head


def _docstring_only(chunk: _Chunk) -> bool:
    """Whether ``chunk`` is the module docstring alone."""
    return (
        len(chunk.statements) == 1
        and isinstance(chunk.statements[0], ast.Expr)
        and isinstance(chunk.statements[0].value, ast.Constant)
        and isinstance(chunk.statements[0].value.value, str)
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
    total: _Totals,
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


class _LineMap:
    """Ported line -> original line, from the chunks' own small diffs."""

    def __init__(self, source: str, chunks: Sequence[_Chunk], texts: Sequence[str]) -> None:
        starts = _line_starts(source)
        edits: list[LineEdit] = []
        b_offset = 0
        for chunk, text in zip(chunks, texts, strict=True):
            original = _span_text(source, starts, chunk.first, chunk.last)
            ported = _lines(text)
            if text != original:
                edits.extend(_line_edits(_lines(original), ported, chunk.first - 1, b_offset))
            b_offset += len(ported)
        self._edits = edits
        self._b_starts = [edit.b_start for edit in edits]

    def edits(self) -> tuple[LineEdit, ...]:
        """Every changed line range, in order."""
        return tuple(self._edits)

    def original_line(self, line: int) -> int:
        """The line of the original that ported line ``line`` (1-based) came from."""
        index = bisect.bisect_right(self._b_starts, line - 1) - 1
        if index < 0:
            return line
        edit = self._edits[index]
        if line - 1 < edit.b_end:
            offset = min(line - 1 - edit.b_start, max(edit.a_end - edit.a_start - 1, 0))
            return edit.a_start + offset + 1
        return line + edit.a_end - edit.b_end
