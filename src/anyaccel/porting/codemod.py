"""``anyaccel port``'s engine: rewrite CUDA-only code into ``get_accelerator()`` calls with libcst.

Formatting and comments are kept. Each rewrite happens only where it is safe to decide from
the source alone; what is left is found by running the checker on the result, so the port
and the check can never disagree. The result must parse, or nothing is returned.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Sequence
from typing import NamedTuple

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.helpers import get_full_name_for_node

from anyaccel.errors import AnyaccelError
from anyaccel.porting.checker import Finding, check_source, classify, could_match

__all__ = ["PortError", "PortResult", "port_source"]

#: Positional parameters of ``torch.cuda.amp.autocast``, which ``torch.autocast`` takes by keyword.
_AUTOCAST_PARAMETERS = ("enabled", "dtype", "cache_enabled")
#: Keyword arguments that take a device, where ``current_device()`` must become a name.
_DEVICE_KEYWORDS = frozenset({"device", "map_location"})
#: Names that visibly hold a device index, so ``.cuda(name)`` ports to ``device_name(name)``.
_INDEX_NAME = re.compile(r"(?:^|_)(?:rank|gpu|gpu_id|gpu_index|device_id|device_index|idx|index)$")
_DEVICE_STRING = re.compile(r"cuda(?::(\d+))?")
#: Codes a whole statement is guarded for when it only configures CUDA.
_GUARDABLE = frozenset({"ACC002", "ACC012", "ACC020"})


class PortError(AnyaccelError, ValueError):
    """The file cannot be ported: it does not parse, or the port would not parse (a bug)."""


class PortResult(NamedTuple):
    """A ported file: the new text, how many rewrites, and what is left for the user."""

    path: str
    original: str
    ported: str
    rewrites: int
    left: list[Finding]

    @property
    def changed(self) -> bool:
        """Whether the port differs from the original."""
        return self.ported != self.original

    def diff(self) -> str:
        """The change as a unified diff (empty if nothing changed)."""
        return "".join(
            difflib.unified_diff(
                self.original.splitlines(keepends=True),
                self.ported.splitlines(keepends=True),
                f"a/{self.path}",
                f"b/{self.path}",
            )
        )


def _accelerator(method: str, *args: cst.Arg) -> cst.Call:
    """``get_accelerator().method(args)``."""
    return cst.Call(func=_accelerator_attr(method), args=list(args))


def _accelerator_attr(attr: str) -> cst.Attribute:
    getter = cst.Call(func=cst.Name("get_accelerator"))
    return cst.Attribute(value=getter, attr=cst.Name(attr))


def _plain(arg: cst.Arg) -> cst.Arg:
    """``arg`` without its trailing comma (it is moved, so its old comma may not fit)."""
    return arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)


def _is_guard(test: cst.BaseExpression) -> bool:
    """Whether ``test`` is ``get_accelerator().device_name() == "cuda"``."""
    try:
        tree = ast.parse(cst.Module([]).code_for_node(test), mode="eval")
    except SyntaxError:
        return False
    from anyaccel.porting.checker import is_cuda_guard

    return is_cuda_guard(tree.body)


class _Aliases(cst.CSTVisitor):
    """Local name -> dotted name it was imported as, as the checker resolves them."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}
        #: Local name -> (module, imported object or None, alias or None), for removing it.
        self.imports: dict[str, tuple[str, str | None, str | None]] = {}

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            name = get_full_name_for_node(alias.name) or ""
            if alias.asname is not None:
                local = get_full_name_for_node(alias.asname.name) or ""
                self.aliases[local] = name
                self.imports[local] = (name, None, local)
            else:
                top = name.split(".")[0]
                self.aliases[top] = top

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.module is None or node.relative or isinstance(node.names, cst.ImportStar):
            return
        module = get_full_name_for_node(node.module) or ""
        for alias in node.names:
            name = get_full_name_for_node(alias.name) or ""
            asname = get_full_name_for_node(alias.asname.name) if alias.asname else None
            self.aliases[asname or name] = f"{module}.{name}"
            self.imports[asname or name] = (module, name, asname)


class _Porter(cst.CSTTransformer):
    """Plans rewrites on the way down (where context is known) and applies them on the way up."""

    def __init__(self, aliases: dict[str, str]) -> None:
        super().__init__()
        self.aliases = aliases
        self.rewrites = 0
        self.used_torch = False
        self.replaced_heads: set[str] = set()  # imported local names we replaced a use of
        self._frozen = 0  # > 0 inside annotations, docstrings, match patterns, CUDA guards
        self._freezes: list[bool] = []
        self._guards: list[bool] = []
        self._device_positions: set[int] = set()  # ids of argument values used as a device
        self._handled: set[int] = set()  # ids of nodes a parent rewrite covers

    # ------------------------------------------------------------------ context
    def qualified(self, node: cst.CSTNode) -> str | None:
        name = get_full_name_for_node(node)
        if name is None or not isinstance(node, cst.Name | cst.Attribute):
            return None
        head, _, rest = name.partition(".")
        base = self.aliases.get(head, head)
        return f"{base}.{rest}" if rest else base

    def _freeze(self, condition: bool) -> None:
        self._freezes.append(condition)
        self._frozen += condition

    def _thaw(self) -> None:
        self._frozen -= self._freezes.pop()

    def visit_Annotation(self, node: cst.Annotation) -> None:
        self._freeze(True)

    def leave_Annotation(
        self, original_node: cst.Annotation, updated_node: cst.Annotation
    ) -> cst.Annotation:
        self._thaw()
        return updated_node

    def visit_Expr(self, node: cst.Expr) -> None:
        self._freeze(isinstance(node.value, cst.SimpleString | cst.ConcatenatedString))

    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> cst.Expr:
        self._thaw()
        return updated_node

    def visit_MatchCase_pattern(self, node: cst.MatchCase) -> None:
        self._freeze(True)

    def leave_MatchCase_pattern(self, node: cst.MatchCase) -> None:
        self._thaw()

    def visit_If(self, node: cst.If) -> None:
        self._guards.append(_is_guard(node.test))

    def leave_If(
        self, original_node: cst.If, updated_node: cst.If
    ) -> cst.BaseStatement | cst.RemovalSentinel:
        self._guards.pop()
        return updated_node

    def visit_If_test(self, node: cst.If) -> None:
        self._freeze(self._guards[-1])

    def leave_If_test(self, node: cst.If) -> None:
        self._thaw()

    def visit_If_body(self, node: cst.If) -> None:
        self._freeze(self._guards[-1])

    def leave_If_body(self, node: cst.If) -> None:
        self._thaw()

    def visit_DictElement_key(self, node: cst.DictElement) -> None:
        self._freeze(True)  # {"cuda": ...} is a label, not a device

    def leave_DictElement_key(self, node: cst.DictElement) -> None:
        self._thaw()

    def visit_SubscriptElement(self, node: cst.SubscriptElement) -> None:
        index = node.slice
        self._freeze(isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString))

    def leave_SubscriptElement(
        self, original_node: cst.SubscriptElement, updated_node: cst.SubscriptElement
    ) -> cst.SubscriptElement:
        self._thaw()
        return updated_node

    def visit_ConcatenatedString(self, node: cst.ConcatenatedString) -> bool:
        return False  # implicit concatenation: not a device string on its own

    # ------------------------------------------------------------------ planning
    def visit_Call(self, node: cst.Call) -> None:
        if self._frozen:
            return
        func = node.func
        if self.qualified(func) == "torch.device" and len(node.args) == 1:
            self._device_positions.add(id(node.args[0].value))
        is_to = isinstance(func, cst.Attribute) and func.attr.value == "to"
        if is_to and node.args and node.args[0].keyword is None:
            self._device_positions.add(id(node.args[0].value))
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value in _DEVICE_KEYWORDS:
                self._device_positions.add(id(arg.value))
        qualified = self.qualified(func)
        kind = classify(qualified) if qualified else None
        if (
            kind
            and kind[0] == "ACC001"
            and any(a.keyword is not None and a.keyword.value == "device" for a in node.args)
        ):
            self._handled.add(id(func))  # device= may be a torch.device: leave it to the user

    # ------------------------------------------------------------------ rewriting
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if self._frozen:
            return updated_node
        func = original_node.func
        qualified = self.qualified(func)
        if qualified == "torch.cuda.current_device" and not original_node.args:
            self.rewrites += 1
            self._note_import(func)
            as_device = id(original_node) in self._device_positions
            return _accelerator("current_device_name" if as_device else "current_device")
        if qualified == "torch.cuda.amp.autocast":
            return self._autocast(func, updated_node)
        if qualified == "torch.cuda.amp.GradScaler":
            self.rewrites += 1
            self._note_import(func)
            self.used_torch = True
            device = cst.Arg(_accelerator("device_name"))
            return updated_node.with_changes(
                func=cst.parse_expression("torch.amp.GradScaler"),
                args=[device, *updated_node.args],
            )
        if isinstance(func, cst.Attribute) and self.qualified(func.value) != "torch":
            assert isinstance(updated_node.func, cst.Attribute)
            receiver = updated_node.func.value
            if func.attr.value == "cuda":
                return self._to_device(updated_node, receiver)
            if func.attr.value == "pin_memory" and not original_node.args:
                self.rewrites += 1
                return _accelerator("pin_memory", cst.Arg(receiver))
        return updated_node

    def _autocast(self, func: cst.BaseExpression, call: cst.Call) -> cst.BaseExpression:
        args = []
        for position, arg in enumerate(call.args):
            if arg.keyword is None:
                if arg.star or position >= len(_AUTOCAST_PARAMETERS):
                    return call  # *args or too many: leave to the user
                arg = arg.with_changes(
                    keyword=cst.Name(_AUTOCAST_PARAMETERS[position]),
                    equal=cst.AssignEqual(
                        whitespace_before=cst.SimpleWhitespace(""),
                        whitespace_after=cst.SimpleWhitespace(""),
                    ),
                )
            args.append(arg)
        self.rewrites += 1
        self._note_import(func)
        self.used_torch = True
        device_type = cst.Arg(
            _accelerator("device_name"),
            keyword=cst.Name("device_type"),
            equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""),
                whitespace_after=cst.SimpleWhitespace(""),
            ),
        )
        return call.with_changes(
            func=cst.parse_expression("torch.autocast"), args=[device_type, *args]
        )

    def _to_device(self, call: cst.Call, receiver: cst.BaseExpression) -> cst.BaseExpression:
        """``x.cuda(...)`` -> ``x.to(...)`` when the device argument is visibly an index."""
        device: cst.Arg | None = None
        rest = []
        for position, arg in enumerate(call.args):
            is_device = (arg.keyword is None and position == 0) or (
                arg.keyword is not None and arg.keyword.value == "device"
            )
            if is_device:
                device = arg
            elif arg.keyword is None or arg.star:
                return call
            else:
                rest.append(arg)
        if device is None:
            target = _accelerator("current_device_name")
        elif self._is_index(device.value):
            target = _accelerator("device_name", _plain(device.with_changes(keyword=None)))
        else:
            return call  # a device object or string: which one is not visible here
        self.rewrites += 1
        return call.with_changes(
            func=cst.Attribute(value=receiver, attr=cst.Name("to")),
            args=[cst.Arg(target), *rest],
        )

    def _is_index(self, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.Integer):
            return True
        if isinstance(value, cst.Call):
            called = get_full_name_for_node(value.func) or ""
            return called.endswith("current_device") and not value.args
        name = get_full_name_for_node(value)
        return name is not None and _INDEX_NAME.search(name.split(".")[-1]) is not None

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        if self._frozen or id(original_node) in self._handled:
            return updated_node
        qualified = self.qualified(original_node)
        kind = classify(qualified) if qualified else None
        if original_node.attr.value == "is_cuda" and kind is None:
            self.rewrites += 1
            return _accelerator("on_accelerator", cst.Arg(updated_node.value))
        return self._contract_member(original_node, updated_node)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        if self._frozen or id(original_node) in self._handled:
            return updated_node
        if self.aliases.get(original_node.value, original_node.value) == original_node.value:
            return updated_node  # not imported under another name
        return self._contract_member(original_node, updated_node)

    def _contract_member(
        self, original: cst.Name | cst.Attribute, updated: cst.BaseExpression
    ) -> cst.BaseExpression:
        qualified = self.qualified(original)
        kind = classify(qualified) if qualified else None
        if kind is None or kind[0] != "ACC001" or qualified is None:
            return updated
        attr = kind[1]
        exact = qualified in (f"torch.cuda.{attr}",) or qualified.endswith(f".{attr}")
        if not exact or attr.endswith("Tensor"):
            return updated  # a deeper attribute, or a tensor type used as a type
        self.rewrites += 1
        self._note_import(original)
        return _accelerator_attr(attr)

    def leave_Subscript(
        self, original_node: cst.Subscript, updated_node: cst.Subscript
    ) -> cst.BaseExpression:
        if self._frozen or self.qualified(original_node.value) != "torch.cuda.default_generators":
            return updated_node
        (element,) = original_node.slice if len(original_node.slice) == 1 else (None,)
        if element is None or not isinstance(element.slice, cst.Index):
            return updated_node
        self.rewrites += 1
        self._note_import(original_node.value)
        return _accelerator("default_generator", cst.Arg(element.slice.value))

    def leave_SimpleString(
        self, original_node: cst.SimpleString, updated_node: cst.SimpleString
    ) -> cst.BaseExpression:
        if self._frozen:
            return updated_node
        value = original_node.evaluated_value
        if not isinstance(value, str):
            return updated_node
        if value == "nccl":
            self.rewrites += 1
            return _accelerator("communication_backend_name")
        match = _DEVICE_STRING.fullmatch(value)
        if match is None:
            return updated_node
        self.rewrites += 1
        if match.group(1) is None:
            return _accelerator("device_name")
        return _accelerator("device_name", cst.Arg(cst.Integer(match.group(1))))

    def leave_FormattedString(
        self, original_node: cst.FormattedString, updated_node: cst.FormattedString
    ) -> cst.BaseExpression:
        parts = updated_node.parts
        if (
            self._frozen
            or len(parts) != 2
            or not isinstance(parts[0], cst.FormattedStringText)
            or parts[0].value != "cuda:"
            or not isinstance(parts[1], cst.FormattedStringExpression)
            or parts[1].format_spec is not None
            or parts[1].conversion is not None
        ):
            return updated_node
        self.rewrites += 1
        return _accelerator("device_name", cst.Arg(parts[1].expression))

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement:
        """A statement that only configures CUDA runs under ``if ... == "cuda":``."""
        if (
            self._frozen
            or len(original_node.body) != 1
            or not self._configures_cuda(original_node.body[0])
        ):
            return updated_node
        self.rewrites += 1
        guard = cst.parse_expression('get_accelerator().device_name() == "cuda"')
        return cst.If(
            test=guard,
            body=cst.IndentedBlock(body=[updated_node.with_changes(leading_lines=[])]),
            leading_lines=updated_node.leading_lines,
        )

    def _configures_cuda(self, statement: cst.BaseSmallStatement) -> bool:
        if isinstance(statement, cst.Expr) and isinstance(statement.value, cst.Call):
            targets: Sequence[cst.BaseExpression] = [statement.value.func]
        elif isinstance(statement, cst.Assign):
            targets = [t.target for t in statement.targets]
        elif isinstance(statement, cst.AugAssign):
            targets = [statement.target]
        else:
            return False
        for target in targets:
            qualified = self.qualified(target) if isinstance(target, cst.Attribute) else None
            kind = classify(qualified) if qualified else None
            if kind is None or kind[0] not in _GUARDABLE:
                return False
        return True

    def _note_import(self, node: cst.CSTNode) -> None:
        """Remember an imported name we replaced a use of, so its import can go if now unused."""
        name = get_full_name_for_node(node)
        if name is not None:
            self.replaced_heads.add(name.split(".")[0])


def port_source(source: str, path: str = "<string>") -> PortResult:
    """``source`` ported, with the findings the port left (lines of the original source).

    Raises ``PortError`` if ``source`` does not parse, or if the port would not parse.
    """
    if not could_match(source):
        return PortResult(path, source, source, 0, [])
    try:
        ast.parse(source)
    except SyntaxError as error:
        where = f"{path}:{error.lineno}:{error.offset}"
        raise PortError(f"{where}: cannot parse: {error.msg}") from None
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        raise PortError(
            f"{path}:{error.raw_line}:{error.raw_column}: libcst cannot parse this file "
            f"({error.message}); a newer libcst may: pip install -U libcst"
        ) from None
    collector = _Aliases()
    module.visit(collector)
    porter = _Porter(collector.aliases)
    ported = module.visit(porter)
    if porter.rewrites:
        ported = _fix_imports(ported, porter, collector)
    text = ported.code
    try:
        ast.parse(text)
    except SyntaxError as error:  # pragma: no cover - a bug in a rewrite; refuse, never write
        raise PortError(
            f"{path}: the port would not parse ({error.msg}, line {error.lineno}); "
            "the file is left as it was. Please report this with the file."
        ) from None
    left = [f._replace(line=_original_line(source, text, f.line)) for f in check_source(text, path)]
    return PortResult(path, source, text, porter.rewrites, left)


def _fix_imports(module: cst.Module, porter: _Porter, imports: _Aliases) -> cst.Module:
    """Add ``from anyaccel import get_accelerator`` (and ``import torch``); drop dead imports."""
    context = CodemodContext()
    if "get_accelerator" not in imports.aliases:  # a DeepSpeed-style import of it is kept
        AddImportsVisitor.add_needed_import(context, "anyaccel", "get_accelerator")
    if porter.used_torch and imports.aliases.get("torch") != "torch":
        AddImportsVisitor.add_needed_import(context, "torch")
    for head in porter.replaced_heads:
        if head in imports.imports and imports.aliases[head].startswith("torch.cuda"):
            module_name, obj, asname = imports.imports[head]
            RemoveImportsVisitor.remove_unused_import(context, module_name, obj, asname)
    module = AddImportsVisitor(context).transform_module(module)
    return RemoveImportsVisitor(context).transform_module(module)


def _original_line(original: str, ported: str, line: int) -> int:
    """The line of ``original`` that line ``line`` of ``ported`` came from (1-based)."""
    matcher = difflib.SequenceMatcher(
        None, original.splitlines(), ported.splitlines(), autojunk=False
    )
    for _, a_start, a_end, b_start, b_end in matcher.get_opcodes():
        if b_start < line <= b_end:
            offset = min(line - 1 - b_start, max(a_end - a_start - 1, 0))
            return a_start + offset + 1
    return line
