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

from anyaccel.errors import AnyaccelError
from anyaccel.porting.analysis import import_aliases
from anyaccel.porting.checker import (
    TRIGGER,
    Finding,
    check_source,
    could_match,
    index_names,
    trigger_lines,
    triggering_imports,
)
from anyaccel.porting.port_imports import WrittenNames, fix_imports
from anyaccel.porting.porter import Porter, configures_cuda
from anyaccel.porting.rules.acc010_012_amp import Autocast, GradScaler
from anyaccel.porting.source_text import newline_of

__all__ = ["MAX_NESTING", "LineEdit", "PortError", "PortResult", "port_source"]

_T = TypeVar("_T")

#: The precision notes the port reports, by what it rewrote (the rules' own words).
PRECISION_AUTOCAST = Autocast.precision_note
PRECISION_SCALER = GradScaler.precision_note


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
        statements = [chunk.statements for chunk in chunks]
        wrote = WrittenNames(total.used_torch, total.helpers, total.replaced_heads)
        fix_imports(texts, statements, config, wrote, aliases, imports)
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
