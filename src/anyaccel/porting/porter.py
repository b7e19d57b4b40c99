"""``anyaccel port``'s walk over one chunk of a file: context on the way down, rules on the way up.

The rewrites live in the rules (:mod:`anyaccel.porting.rules`, ``plan_*``/``rewrite_*``
hooks); this module knows what is not code to port (annotations, docstrings, labels, match
patterns, the bodies of ``if get_accelerator().device_name() == "cuda":``), where a value is
passed as a device, and guards the statements that only configure CUDA (rules with
``guarded``). Needs libcst.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Sequence

import libcst as cst
from libcst.helpers import get_full_name_for_node

from anyaccel.porting.analysis import NO_NAMES, IndexNames, is_cuda_guard, qualified_name
from anyaccel.porting.rewriting import Rewriter
from anyaccel.porting.rule import PortingRule
from anyaccel.porting.rules import CALL_ORDER, RULES, classify

__all__ = ["Porter", "configures_cuda"]

#: Keyword arguments that take a device, where ``current_device()`` must become a name.
_DEVICE_KEYWORDS = frozenset({"device", "map_location"})
#: What :meth:`Porter.needs` takes for ``import torch`` (any other name is a helper).
_TORCH = "torch"


def _hooks(
    prefix: str, kind: str, rules: Iterable[PortingRule]
) -> tuple[Callable[..., object], ...]:
    return tuple(
        hook for unit in rules if (hook := getattr(unit, f"{prefix}_{kind}", None)) is not None
    )


_PLANS = {
    kind: _hooks("plan", kind, RULES.values())
    for kind in ("Assign", "AnnAssign", "AssignTarget", "AugAssign", "Call")
}
_REWRITES = {
    kind: _hooks("rewrite", kind, RULES.values())
    for kind in (
        "Attribute",
        "Name",
        "Subscript",
        "SimpleString",
        "FormattedString",
        "BinaryOperation",
    )
}
_REWRITES["Call"] = _hooks("rewrite", "Call", CALL_ORDER)


def configures_cuda(statement: ast.stmt, aliases: dict[str, str]) -> bool:
    """Whether ``statement`` only calls or sets what a ``guarded`` rule reports (port guards it)."""
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        targets = [statement.value.func]
    elif isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, ast.AugAssign):
        targets = [statement.target]
    else:
        return False
    for target in targets:
        qualified = qualified_name(target, aliases) if isinstance(target, ast.Attribute) else None
        kind = classify(qualified) if qualified is not None else None
        if kind is None or not RULES[kind[0]].guarded:
            return False
    return True


def _is_guard(test: cst.BaseExpression) -> bool:
    """Whether ``test`` is ``get_accelerator().device_name() == "cuda"``."""
    try:
        tree = ast.parse(cst.Module([]).code_for_node(test), mode="eval")
    except SyntaxError:
        return False
    return is_cuda_guard(tree.body)


class Porter(cst.CSTTransformer):
    """Plans rewrites on the way down (where context is known) and applies them on the way up.

    It is the rules' :class:`~anyaccel.porting.rewriting.Rewriter`.
    """

    def __init__(
        self, aliases: dict[str, str], index_names: Callable[[], IndexNames] = lambda: NO_NAMES
    ) -> None:
        super().__init__()
        self.aliases = aliases
        self.index_names = index_names  # the file's, read when a name's kind is first needed
        self.rewrites = 0
        self.used_torch = False
        self.helpers: set[str] = set()  # helpers of anyaccel(.distributed) the port wrote
        self.replaced_heads: set[str] = set()  # imported local names we replaced a use of
        self._marks: set[tuple[str, object]] = set()
        self._qualified: dict[int, str | None] = {}  # by id of a node of the original tree
        self._claimed: set[int] = set()  # ids of nodes a parent's rule decided about
        self._device_positions: set[int] = set()  # ids of argument values used as a device
        self._created_guards: set[int] = set()  # ids of the ``if ... == "cuda":`` we wrote
        self._frozen = 0  # > 0 inside annotations, docstrings, match patterns, CUDA guards
        self._freezes: list[bool] = []
        self._guards: list[bool] = []

    # ------------------------------------------------------------------ the rules' scope
    def qualified(self, node: cst.CSTNode) -> str | None:
        if not isinstance(node, cst.Name | cst.Attribute):
            return None
        key = id(node)  # several rules ask about the same callee: answer once
        if key not in self._qualified:
            name = get_full_name_for_node(node)
            if name is None:
                self._qualified[key] = None
            else:
                head, _, rest = name.partition(".")
                base = self.aliases.get(head, head)
                self._qualified[key] = f"{base}.{rest}" if rest else base
        return self._qualified[key]

    def rewrote(self, imported: cst.CSTNode | None = None) -> None:
        self.rewrites += 1
        if imported is not None:  # an imported name we replaced a use of: its import may go
            name = get_full_name_for_node(imported)
            if name is not None:
                self.replaced_heads.add(name.split(".")[0])

    def needs(self, name: str) -> None:
        if name == _TORCH:
            self.used_torch = True
        else:
            self.helpers.add(name)

    def mark(self, code: str, key: object) -> None:
        self._marks.add((code, key))

    def is_marked(self, code: str, key: object) -> bool:
        return (code, key) in self._marks

    def claim(self, node: cst.CSTNode) -> None:
        self._claimed.add(id(node))

    def is_device_position(self, node: cst.CSTNode) -> bool:
        return id(node) in self._device_positions

    # ------------------------------------------------------------------ what is not code
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

    def visit_Import(self, node: cst.Import) -> bool:
        return False  # "import torch.cuda.nccl as n" names a module: never a call to rewrite

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_ConcatenatedString(self, node: cst.ConcatenatedString) -> bool:
        return False  # implicit concatenation: not a device string on its own

    # ------------------------------------------------------------------ planning
    def _plan(self, kind: str, node: cst.CSTNode) -> None:
        porter: Rewriter = self
        for hook in _PLANS[kind]:
            hook(node, porter)

    def visit_Assign(self, node: cst.Assign) -> None:
        self._plan("Assign", node)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._plan("AnnAssign", node)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._plan("AssignTarget", node)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._plan("AugAssign", node)

    def visit_Call(self, node: cst.Call) -> None:
        if self._frozen:
            return
        func = node.func
        qualified = self.qualified(func)
        if qualified == "torch.device" and len(node.args) == 1:
            self._device_positions.add(id(node.args[0].value))
        is_to = isinstance(func, cst.Attribute) and func.attr.value == "to"
        if is_to and node.args and node.args[0].keyword is None:
            self._device_positions.add(id(node.args[0].value))
        fsdp = qualified is not None and qualified.rsplit(".", 1)[-1] == "FullyShardedDataParallel"
        for arg in node.args:
            if arg.keyword is not None and (
                arg.keyword.value in _DEVICE_KEYWORDS or (fsdp and arg.keyword.value == "device_id")
            ):
                self._device_positions.add(id(arg.value))
        self._plan("Call", node)

    # ------------------------------------------------------------------ rewriting
    def _rewrite(self, kind: str, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
        """The first rule's replacement for ``original``, or ``updated`` when none has one."""
        if self._frozen or id(original) in self._claimed:
            return updated
        porter: Rewriter = self  # what the rules see (mypy holds the porter to it)
        for hook in _REWRITES[kind]:
            ported = hook(original, updated, porter)
            if ported is not None:
                assert isinstance(ported, cst.CSTNode)
                return ported
        return updated

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        return self._expression("Call", original_node, updated_node)

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        return self._expression("Attribute", original_node, updated_node)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        if self.aliases.get(original_node.value, original_node.value) == original_node.value:
            return updated_node  # not imported under another name
        return self._expression("Name", original_node, updated_node)

    def leave_Subscript(
        self, original_node: cst.Subscript, updated_node: cst.Subscript
    ) -> cst.BaseExpression:
        return self._expression("Subscript", original_node, updated_node)

    def leave_SimpleString(
        self, original_node: cst.SimpleString, updated_node: cst.SimpleString
    ) -> cst.BaseExpression:
        return self._expression("SimpleString", original_node, updated_node)

    def leave_FormattedString(
        self, original_node: cst.FormattedString, updated_node: cst.FormattedString
    ) -> cst.BaseExpression:
        return self._expression("FormattedString", original_node, updated_node)

    def leave_BinaryOperation(
        self, original_node: cst.BinaryOperation, updated_node: cst.BinaryOperation
    ) -> cst.BaseExpression:
        return self._expression("BinaryOperation", original_node, updated_node)

    def _expression(
        self, kind: str, original: cst.BaseExpression, updated: cst.BaseExpression
    ) -> cst.BaseExpression:
        ported = self._rewrite(kind, original, updated)
        assert isinstance(ported, cst.BaseExpression)
        return ported

    # ------------------------------------------------------------------ guarding
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
        created = cst.If(
            test=guard,
            body=cst.IndentedBlock(body=[updated_node.with_changes(leading_lines=[])]),
            leading_lines=updated_node.leading_lines,
        )
        self._created_guards.add(id(created))
        return created

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        return updated_node.with_changes(body=self._merge_guards(updated_node.body))

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        return updated_node.with_changes(body=self._merge_guards(updated_node.body))

    def _merge_guards(self, body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        """Adjacent statements we guarded (no blank line between) under one ``if``."""
        merged: list[cst.BaseStatement] = []
        for statement in body:
            previous = merged[-1] if merged else None
            if (
                isinstance(statement, cst.If)
                and isinstance(previous, cst.If)
                and id(statement) in self._created_guards
                and id(previous) in self._created_guards
                and all(line.comment is not None for line in statement.leading_lines)
                and isinstance(previous.body, cst.IndentedBlock)
                and isinstance(statement.body, cst.IndentedBlock)
            ):
                (inner,) = statement.body.body
                inner = inner.with_changes(leading_lines=statement.leading_lines)
                body_block = previous.body.with_changes(body=[*previous.body.body, inner])
                joined = previous.with_changes(body=body_block)
                self._created_guards.add(id(joined))
                merged[-1] = joined
            else:
                merged.append(statement)
        return merged

    def _configures_cuda(self, statement: cst.BaseSmallStatement) -> bool:
        """:func:`configures_cuda` of the statement's source (one analysis for both trees)."""
        if isinstance(statement, cst.Expr) and isinstance(statement.value, cst.Call):
            targets: Sequence[cst.BaseExpression] = [statement.value.func]
        elif isinstance(statement, cst.Assign):
            targets = [t.target for t in statement.targets]
        elif isinstance(statement, cst.AugAssign):
            targets = [statement.target]
        else:
            return False
        if not all(isinstance(t, cst.Attribute) for t in targets):
            return False  # most statements: no need to read them again
        try:
            (tree,) = ast.parse(cst.Module([]).code_for_node(statement).strip()).body
        except (SyntaxError, ValueError):
            return False
        return configures_cuda(tree, self.aliases)
