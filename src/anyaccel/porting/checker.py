"""``anyaccel check``'s engine: find CUDA-specific code in Python source by parsing it.

Stdlib ``ast`` only, and a file without any trigger word (``cud``, ``nccl``, ``pin_memory``)
is not even parsed, so a pre-commit run over thousands of files stays fast.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Iterable
from typing import NamedTuple

from anyaccel.porting.rules import CUDA_ALIASES, RULES, portable_cuda_names

__all__ = [
    "TRIGGER",
    "Finding",
    "check_source",
    "classify",
    "could_match",
    "is_cuda_guard",
    "parse_ignores",
    "trigger_lines",
]

#: Every rule needs one of these in the source text; a file without them has no finding.
TRIGGER = re.compile(r"cud|CUD|nccl|pin_memory")
_IGNORE = re.compile(r"#\s*anyaccel:\s*ignore(?:\[([A-Za-z0-9_,\s]*)\])?")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_DEVICE_STRING = re.compile(r"cuda(?::\d+)?")


class Finding(NamedTuple):
    """One piece of CUDA-specific code: where it is (1-based line and column) and the fix."""

    path: str
    line: int
    column: int
    code: str
    message: str
    suggestion: str

    def format(self) -> str:
        """``file:line:col: CODE message (suggestion)``."""
        return (
            f"{self.path}:{self.line}:{self.column}: {self.code} {self.message} ({self.suggestion})"
        )

    def to_dict(self) -> dict[str, str | int]:
        """The finding as JSON-ready data."""
        return self._asdict()


def could_match(source: str) -> bool:
    """Whether ``source`` contains a word some rule needs (cheap pre-filter before parsing)."""
    return TRIGGER.search(source) is not None


def source_lines(source: str) -> list[str]:
    """The lines of ``source`` as Python numbers them: broken at ``\\n``, ``\\r\\n``, ``\\r`` only.

    ``str.splitlines`` also breaks at form feeds and Unicode separators, which Python does not.
    """
    return _LINE_BREAK.split(source)


def _line_breaks(source: str, start: int, end: int) -> int:
    """How many line breaks (``\\n``, ``\\r\\n``, lone ``\\r``) ``source[start:end]`` holds."""
    return (
        source.count("\n", start, end)
        + source.count("\r", start, end)
        - source.count("\r\n", start, end)
    )


def parse_ignores(source: str) -> dict[int, frozenset[str] | None]:
    """Line -> codes silenced there by ``# anyaccel: ignore[CODE,...]`` (``None``: all codes)."""
    ignores: dict[int, frozenset[str] | None] = {}
    if "anyaccel:" not in source:
        return ignores
    for number, line in enumerate(source_lines(source), start=1):
        match = _IGNORE.search(line)
        if match is None:
            continue
        codes = match.group(1)
        if codes is None or not codes.strip():
            ignores[number] = None
        else:
            ignores[number] = frozenset(c.strip().upper() for c in codes.split(",") if c.strip())
    return ignores


def classify(qualified: str) -> tuple[str, str] | None:
    """(code, contract attribute or '') for a dotted name like ``torch.cuda.synchronize``."""
    if qualified == "torch.cuda.amp" or qualified.startswith("torch.cuda.amp."):
        member = qualified[len("torch.cuda.amp.") :].split(".")[0]
        if member == "autocast":
            return "ACC010", ""
        if member == "GradScaler":
            return "ACC011", ""
        return "ACC012", ""
    for flags in ("torch.backends.cudnn", "torch.backends.cuda"):
        if qualified == flags or qualified.startswith(flags + "."):
            return "ACC020", ""
    if qualified == "torch.cuda":
        return "ACC002", ""
    if not qualified.startswith("torch.cuda."):
        return None
    rest = qualified[len("torch.cuda.") :]
    for alias, attr in CUDA_ALIASES.items():
        if rest == alias or rest.startswith(alias + "."):
            return "ACC001", attr
    member = rest.split(".")[0]
    if member == "current_device":
        return "ACC003", ""
    if member == "default_generators":
        return "ACC004", ""
    if member in portable_cuda_names():
        return "ACC001", member
    return "ACC002", ""


#: Fields of compound statements that hold nested statement blocks.
_BLOCKS = frozenset({"body", "orelse", "finalbody", "handlers", "cases"})


class _Visitor(ast.NodeVisitor):
    """Collects findings; statements on lines without a trigger word are never descended into."""

    def __init__(self, trigger_lines: list[int]) -> None:
        self.trigger_lines = trigger_lines
        self.aliases: dict[str, str] = {}
        self.found: list[tuple[ast.expr, str, str, str]] = []  # node, code, name, attr

    def collect_aliases(self, statements: list[ast.stmt]) -> None:
        """Local name -> the dotted name it was imported as (``tc`` -> ``torch.cuda``)."""
        for node in statements:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.aliases[top] = top
            elif isinstance(node, ast.ImportFrom):
                if node.module and not node.level:
                    for alias in node.names:
                        if alias.name != "*":
                            qualified = f"{node.module}.{alias.name}"
                            self.aliases[alias.asname or alias.name] = qualified
            else:
                for block in self._blocks(node):
                    self.collect_aliases(block)

    @staticmethod
    def _blocks(node: ast.AST) -> list[list[ast.stmt]]:
        blocks: list[list[ast.stmt]] = []
        for name in _BLOCKS:
            value = getattr(node, name, None)
            if not value:
                continue
            if name in ("handlers", "cases"):
                blocks.extend(item.body for item in value)
            else:
                blocks.append(value)
        return blocks

    def _touches(self, node: ast.AST) -> bool:
        first = getattr(node, "lineno", 0)
        for decorator in getattr(node, "decorator_list", ()):  # they start above ``def``
            first = min(first, decorator.lineno)
        last = getattr(node, "end_lineno", None) or first
        index = bisect.bisect_left(self.trigger_lines, first)
        return index < len(self.trigger_lines) and self.trigger_lines[index] <= last

    def scan(self, statements: list[ast.stmt]) -> None:
        """Visit the statements (and nested blocks) that span a line with a trigger word."""
        for node in statements:
            if not self._touches(node):
                continue
            if isinstance(node, ast.If) and is_cuda_guard(node.test):
                self.scan(node.orelse)  # the body runs on CUDA only, on purpose
                continue
            blocks = self._blocks(node)
            if not blocks:
                self.visit(node)
                continue
            for name, value in ast.iter_fields(node):  # the header: test, iter, decorators...
                if name in _BLOCKS:
                    continue
                for item in value if isinstance(value, list) else [value]:
                    if isinstance(item, ast.AST):
                        self.visit(item)
            for field in ("handlers", "cases"):
                for item in getattr(node, field, None) or ():
                    for part in (getattr(item, "type", None), getattr(item, "guard", None)):
                        if isinstance(part, ast.AST):
                            self.visit(part)
                    pattern = getattr(item, "pattern", None)
                    if isinstance(pattern, ast.AST):
                        self.visit(pattern)
            for block in blocks:
                self.scan(block)

    def qualified_name(self, node: ast.expr) -> str | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        parts.append(self.aliases.get(node.id, node.id))
        return ".".join(reversed(parts))

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # a docstring or a bare string: prose, not code
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        qualified = self.qualified_name(node)
        if qualified is not None:
            kind = classify(qualified)
            if kind is not None:
                self.found.append((node, kind[0], qualified, kind[1]))
                return
        if node.attr == "is_cuda" and isinstance(node.ctx, ast.Load):
            self.found.append((node, "ACC031", ".is_cuda", ""))
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        qualified = self.aliases.get(node.id)
        if qualified is not None and qualified != node.id:
            kind = classify(qualified)
            if kind is not None:
                self.found.append((node, kind[0], qualified, kind[1]))

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute):
            if func.attr == "cuda" and self.qualified_name(func.value) != "torch":
                self.found.append((node, "ACC030", ".cuda()", ""))
            elif func.attr == "pin_memory" and not node.args and not node.keywords:
                self.found.append((node, "ACC032", ".pin_memory()", ""))
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        for key in node.keys:  # {"cuda": ...} is a label, not a device
            if key is not None:
                self._visit_label(key)
        for value in node.values:
            self.visit(value)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self.visit(node.value)
        self._visit_label(node.slice)  # state["cuda"] is a label too

    def _visit_label(self, node: ast.expr) -> None:
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            self.visit(node)
        elif node.value == "CUDA_VISIBLE_DEVICES":  # an environment key is what matters here
            self.found.append((node, "ACC042", "'CUDA_VISIBLE_DEVICES'", ""))

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if not isinstance(value, str):
            return
        if _DEVICE_STRING.fullmatch(value):
            self.found.append((node, "ACC040", repr(value), ""))
        elif value == "nccl":
            self.found.append((node, "ACC041", "'nccl'", ""))
        elif value == "CUDA_VISIBLE_DEVICES":
            self.found.append((node, "ACC042", "'CUDA_VISIBLE_DEVICES'", ""))

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        if is_cuda_fstring(node):
            self.found.append((node, "ACC040", "f'cuda:{...}'", ""))
            return
        self.generic_visit(node)


def is_cuda_guard(test: ast.expr) -> bool:
    """Whether ``test`` is ``get_accelerator().device_name() == "cuda"`` (code meant for CUDA)."""
    if not (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "cuda"
    ):
        return False
    call = test.left
    if not (
        isinstance(call, ast.Call)
        and not call.args
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "device_name"
        and isinstance(call.func.value, ast.Call)
    ):
        return False
    getter = call.func.value.func
    name = getter.attr if isinstance(getter, ast.Attribute) else getattr(getter, "id", "")
    return name == "get_accelerator"


def is_cuda_fstring(node: ast.JoinedStr) -> bool:
    """Whether ``node`` is exactly ``f"cuda:{expr}"`` (a device string built from an index)."""
    values = node.values
    return (
        len(values) == 2
        and isinstance(values[0], ast.Constant)
        and values[0].value == "cuda:"
        and isinstance(values[1], ast.FormattedValue)
        and values[1].format_spec is None
    )


def trigger_lines(source: str, pattern: re.Pattern[str]) -> list[int]:
    """Sorted 1-based numbers of the lines where ``pattern`` matches."""
    lines: list[int] = []
    line, position = 1, 0
    for match in pattern.finditer(source):
        line += _line_breaks(source, position, match.start())
        position = match.start()
        if not lines or lines[-1] != line:
            lines.append(line)
    return lines


def _column(lines: list[str], line: int, byte_offset: int) -> int:
    """1-based character column from ``ast``'s UTF-8 byte offset."""
    if 0 < line <= len(lines) and not lines[line - 1].isascii():
        return len(lines[line - 1].encode()[:byte_offset].decode(errors="ignore")) + 1
    return byte_offset + 1


def check_source(source: str, path: str = "<string>") -> list[Finding]:
    """Every finding in ``source`` not silenced by an inline ignore, in source order.

    Raises ``SyntaxError`` when ``source`` is not valid Python.
    """
    if not could_match(source):
        return []
    tree = ast.parse(source, filename=path)
    visitor = _Visitor(trigger_lines(source, TRIGGER))
    visitor.collect_aliases(tree.body)
    # Names imported from torch.cuda (``from torch.cuda import synchronize``) trigger too.
    imported = sorted(
        {name for name, target in visitor.aliases.items() if classify(target) and name != target}
    )
    if imported:
        words = re.compile(r"\b(?:" + "|".join(map(re.escape, imported)) + r")\b")
        visitor.trigger_lines = sorted({*visitor.trigger_lines, *trigger_lines(source, words)})
    visitor.scan(tree.body)
    ignores = parse_ignores(source)
    lines = source_lines(source)
    findings = []
    for node, code, name, attr in visitor.found:
        silenced = ignores.get(node.lineno, frozenset())
        if silenced is None or code in silenced:
            continue
        rule = RULES[code]
        findings.append(
            Finding(
                path,
                node.lineno,
                _column(lines, node.lineno, node.col_offset),
                code,
                rule.message.format(name=name),
                rule.suggestion.format(attr=attr),
            )
        )
    findings.sort(key=lambda f: (f.line, f.column, f.code))
    return findings


def select(findings: Iterable[Finding], enabled: frozenset[str]) -> list[Finding]:
    """The findings whose code is in ``enabled``."""
    return [f for f in findings if f.code in enabled]
