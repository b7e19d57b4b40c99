"""``anyaccel check``'s engine: walk a file's tree once and let every rule look at it.

The rules live in :mod:`anyaccel.porting.rules`, one unit each; this module is the walk that
calls their hooks, the inline ignores and the findings. Stdlib ``ast`` only, and a file
without any trigger word (``cud``, ``nccl``, ``pin_memory``, ``.to(``, ``device_ids``...) is not
even parsed, so a pre-commit run over thousands of files stays fast.
"""

from __future__ import annotations

import ast
import bisect
import functools
import re
from collections.abc import Callable, Iterable
from typing import NamedTuple

from anyaccel.porting.analysis import (
    INDEX_NAME,
    NO_NAMES,
    IndexNames,
    import_aliases,
    index_names,
    is_cuda_fstring,
    is_cuda_guard,
    is_index,
    is_lightning_entry,
    qualified_name,
    runtime_device_index,
    statement_blocks,
)
from anyaccel.porting.rule import PortingRule, Scope
from anyaccel.porting.rules import RULES, classify
from anyaccel.porting.rules.acc043_045_device_indexes import (
    DEVICE_COUNTS,
    PROCESS_COUNT_KEYWORDS,
    PROCESS_COUNT_NAME,
)

__all__ = [
    "DEVICE_COUNTS",
    "INDEX_NAME",
    "NO_NAMES",
    "PROCESS_COUNT_KEYWORDS",
    "PROCESS_COUNT_NAME",
    "TRIGGER",
    "Finding",
    "IndexNames",
    "check_source",
    "classify",
    "could_match",
    "index_names",
    "is_cuda_guard",
    "is_index",
    "is_lightning_entry",
    "parse_ignores",
    "runtime_device_index",
    "trigger_lines",
    "triggering_imports",
]

#: Every rule needs one of these in the source text; a file without them has no finding.
TRIGGER = re.compile(
    r"(?=[cCnpadoDG.])(?:"  # each alternative's first letter: most positions fail at once
    r"cud|CUD|nccl|pin_memory|\baccelerator\b|default_backend_for_device|device_ids|GradScaler|"
    r"output_device|DistributedDataParallel|\.to\("
    # torch.device(i) and device=i, where i may be an index (is_index decides)
    r"|\bdevice\(\s*(?:\d|int\(|[A-Za-z_][\w.]*\s*\))"
    r"|\bdevice\s*=\s*(?:\d|int\(|[\w.]*(?:rank|gpu|gpu_id|gpu_idx|gpu_index|device_id|"
    r"device_idx|device_index|device_ordinal)\b)"
    # FSDP's device_id=i (is_index and the call decide)
    r"|\bdevice_id\s*=(?!=))"
)
_IGNORE = re.compile(r"#\s*anyaccel:\s*ignore(?:\[([A-Za-z0-9_,\s]*)\])?")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


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


#: A rule's hook: ``True`` when it dealt with the node (later rules and the walk skip it).
_Hook = Callable[[ast.AST, Scope], bool]
#: The node kinds rules hook into; ``label`` is a string used as a dict key or subscript.
_HOOKED = ("Assign", "AnnAssign", "Attribute", "Name", "Call", "BinOp", "Constant", "JoinedStr")


def _hooks(rules: Iterable[PortingRule]) -> dict[str, tuple[_Hook, ...]]:
    """Node kind -> the rules' hooks for it, in code order."""
    return {
        kind: tuple(
            hook for unit in rules if (hook := getattr(unit, f"visit_{kind}", None)) is not None
        )
        for kind in (*_HOOKED, "label")
    }


_HOOKS = _hooks(RULES.values())


class _Walk(ast.NodeVisitor):
    """One walk over the statements on trigger lines, calling the rules' hooks on the way.

    It is the rules' :class:`~anyaccel.porting.rule.Scope`: imports, index names, marks and
    claims, and the findings. Docstrings, labels (``{"cuda": ...}``, ``state["cuda"]``) and the
    bodies of ``if get_accelerator().device_name() == "cuda":`` are not code to judge.
    """

    def __init__(self, trigger_lines: list[int], tree: ast.Module, aliases: dict[str, str]) -> None:
        self.trigger_lines = trigger_lines
        self.tree = tree
        self.aliases = aliases
        self.found: list[tuple[ast.expr, str, str, str]] = []  # node, code, name, attr
        self._marks: set[tuple[str, int]] = set()
        self._qualified: dict[int, str | None] = {}
        self._claimed: set[int] = set()

    # ------------------------------------------------------------------ the rules' scope
    @functools.cached_property
    def index_names(self) -> IndexNames:
        return index_names(self.tree)

    def qualified_name(self, node: ast.expr) -> str | None:
        key = id(node)  # several rules ask about the same callee: answer once
        if key not in self._qualified:
            self._qualified[key] = qualified_name(node, self.aliases)
        return self._qualified[key]

    def report(self, node: ast.expr, code: str, name: str, attr: str = "") -> None:
        self.found.append((node, code, name, attr))

    def mark(self, code: str, node: ast.AST) -> None:
        self._marks.add((code, id(node)))

    def is_marked(self, code: str, node: ast.AST) -> bool:
        return (code, id(node)) in self._marks

    def claim(self, node: ast.AST) -> None:
        self._claimed.add(id(node))

    # ------------------------------------------------------------------ the walk
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
            blocks = statement_blocks(node)
            if not blocks:
                self.visit(node)
                continue
            for name, value in ast.iter_fields(node):  # the header: test, iter, decorators...
                if name in ("body", "orelse", "finalbody", "handlers", "cases"):
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

    def _dispatch(self, kind: str, node: ast.AST) -> bool:
        """Call the hooks for ``kind`` until one deals with ``node``."""
        scope: Scope = self  # what the rules see (mypy holds the walk to it)
        return any(hook(node, scope) for hook in _HOOKS[kind])

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # a docstring or a bare string: prose, not code
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        self._dispatch("Assign", node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._dispatch("AnnAssign", node)
        self.generic_visit(node)

    def _named(self, node: ast.expr, qualified: str | None) -> bool:
        """Report ``node`` if a rule judges its dotted name."""
        kind = classify(qualified) if qualified is not None else None
        if kind is not None:
            self.report(node, kind[0], qualified or "", kind[1])
        return kind is not None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if self._dispatch("Attribute", node) or self._named(node, self.qualified_name(node)):
            return
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if self._dispatch("Name", node):
            return
        qualified = self.aliases.get(node.id)
        if qualified is not None and qualified != node.id:
            self._named(node, qualified)

    def visit_Call(self, node: ast.Call) -> None:
        self._dispatch("Call", node)
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if not self._dispatch("BinOp", node):
            self.generic_visit(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        if not self._dispatch("JoinedStr", node):
            self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and id(node) not in self._claimed:
            self._dispatch("Constant", node)

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
        if runtime_device_index(node) is not None or (
            isinstance(node, ast.JoinedStr) and is_cuda_fstring(node)
        ):
            return  # {"cuda:%d" % 0: ...}: where a storage was saved, a label too
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            self.visit(node)
        else:
            self._dispatch("label", node)


def triggering_imports(aliases: dict[str, str]) -> list[str]:
    """Local names of imports a rule looks at: ``torch.cuda`` names and ``DDP``."""
    return sorted(
        name
        for name, target in aliases.items()
        if name != target
        and (classify(target) or target.rsplit(".", 1)[-1] == "DistributedDataParallel")
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
    aliases, _ = import_aliases(tree.body)
    visitor = _Walk(trigger_lines(source, TRIGGER), tree, aliases)
    # Names imported from torch.cuda (``from torch.cuda import synchronize``) trigger too.
    imported = triggering_imports(visitor.aliases)
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
