"""``anyaccel port``'s engine: rewrite CUDA-only code into ``get_accelerator()`` calls with libcst.

Formatting and comments are kept. Each rewrite happens only where it is safe to decide from
the source alone; what is left is found by running the checker on the result, so the port
and the check can never disagree. The result must parse, or nothing is returned.
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
    DEVICE_COUNTS,
    NO_NAMES,
    PROCESS_COUNT_KEYWORDS,
    PROCESS_COUNT_NAME,
    TRIGGER,
    Finding,
    IndexNames,
    check_source,
    classify,
    could_match,
    index_names,
    is_index,
    is_lightning_entry,
    runtime_device_index,
    trigger_lines,
    triggering_imports,
)
from anyaccel.porting.rules import ACCELERATOR_PORTS
from anyaccel.porting.source_text import newline_of

__all__ = ["MAX_NESTING", "LineEdit", "PortError", "PortResult", "port_source"]

_T = TypeVar("_T")

#: Positional parameters of ``torch.cuda.amp.autocast``, which ``torch.autocast`` takes by keyword.
_AUTOCAST_PARAMETERS = ("enabled", "dtype", "cache_enabled")
#: Positional parameters of ``torch.cuda.amp.GradScaler`` (``torch.amp.GradScaler`` takes the
#: device first, then the same ones).
_SCALER_PARAMETERS = ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")
#: Autocast and scaler calls that take a device type first: when it is CUDA's, they meant CUDA's
#: float16 default, which the port keeps honest through the precision helpers.
_DEVICE_AUTOCASTS = frozenset({"torch.autocast", "torch.amp.autocast"})
_DEVICE_SCALERS = frozenset({"torch.amp.GradScaler", "torch.GradScaler"})
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
#: Keyword arguments that take a device, where ``current_device()`` must become a name.
_DEVICE_KEYWORDS = frozenset({"device", "map_location"})
#: FSDP's ``device_id=`` names a device: an index there is ``torch.device(index)``, which
#: raises on a host without that accelerator.
_FSDP = "FullyShardedDataParallel"
#: Names that visibly hold a device index, so ``.cuda(name)`` ports to ``device_name(name)``.
_INDEX_NAME = re.compile(r"(?:^|_)(?:rank|gpu|gpu_id|gpu_index|device_id|device_index|idx|index)$")
_DEVICE_STRING = re.compile(r"cuda(?::(\d+))?")
#: Codes a whole statement is guarded for when it only configures CUDA.
_GUARDABLE = frozenset({"ACC002", "ACC012", "ACC020"})
#: ``torch.accelerator`` functions and the contract method each ports to.
_ACCELERATOR_CALLS = {
    f"torch.accelerator.{name}": method for name, method in ACCELERATOR_PORTS.items()
}
_CURRENT_ACCELERATOR = "torch.accelerator.current_accelerator"
#: Where the public helpers the port writes live: anyaccel.distributed, except these.
_HELPERS_MODULE = "anyaccel.distributed"
_HELPER_MODULES = {"autocast_dtype": "anyaccel", "grad_scaler_applies": "anyaccel"}


def _as_ast(node: cst.BaseExpression) -> ast.expr | None:
    """``node`` as a stdlib expression, to ask the checker's predicates about it."""
    try:
        return ast.parse(cst.Module([]).code_for_node(node).strip(), mode="eval").body
    except SyntaxError:  # a multi-line expression outside its brackets
        try:
            code = "(" + cst.Module([]).code_for_node(node) + ")"
            return ast.parse(code, mode="eval").body
        except SyntaxError:
            return None


def _last_name(node: cst.BaseExpression) -> str | None:
    name = get_full_name_for_node(node) if isinstance(node, cst.Name | cst.Attribute) else None
    return None if name is None else name.rsplit(".", 1)[-1]


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


def _is_fsdp(qualified: str | None) -> bool:
    """Whether ``qualified`` names FSDP's wrapper (``FullyShardedDataParallel``, any alias)."""
    return qualified is not None and qualified.rsplit(".", 1)[-1] == _FSDP


def _accelerator(method: str, *args: cst.Arg) -> cst.Call:
    """``get_accelerator().method(args)``."""
    return cst.Call(func=_accelerator_attr(method), args=list(args))


def _accelerator_attr(attr: str) -> cst.Attribute:
    getter = cst.Call(func=cst.Name("get_accelerator"))
    return cst.Attribute(value=getter, attr=cst.Name(attr))


def _keyword(name: str, value: cst.BaseExpression) -> cst.Arg:
    """``name=value`` with no spaces around ``=``."""
    return cst.Arg(
        value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""),
            whitespace_after=cst.SimpleWhitespace(""),
        ),
    )


def _by_keyword(args: Sequence[cst.Arg], parameters: tuple[str, ...]) -> list[cst.Arg] | None:
    """``args`` with positional ones named after ``parameters`` (``None``: ``*args``, too many)."""
    named = []
    for position, arg in enumerate(args):
        if arg.keyword is None:
            if arg.star or position >= len(parameters):
                return None
            arg = arg.with_changes(
                keyword=cst.Name(parameters[position]),
                equal=cst.AssignEqual(
                    whitespace_before=cst.SimpleWhitespace(""),
                    whitespace_after=cst.SimpleWhitespace(""),
                ),
            )
        elif arg.star:
            return None
        named.append(arg)
    return named


def _split_device(args: Sequence[cst.Arg], keyword: str) -> tuple[cst.Arg, list[cst.Arg]] | None:
    """The device argument (first, or ``keyword=``) and the others; ``None`` with ``*args``."""
    if any(a.star for a in args):
        return None
    for position, arg in enumerate(args):
        if (position == 0 and arg.keyword is None) or (
            arg.keyword is not None and arg.keyword.value == keyword
        ):
            return arg, [a for a in args if a is not arg]
    return None


def _names_cuda(call: cst.Call, keyword: str) -> bool:
    """Whether ``call``'s device argument (first, or ``keyword=``) is the literal ``"cuda"``."""
    for position, arg in enumerate(call.args):
        if (position == 0 and arg.keyword is None) or (
            arg.keyword is not None and arg.keyword.value == keyword
        ):
            value = arg.value
            return isinstance(value, cst.SimpleString) and value.evaluated_value == "cuda"
    return False


def _names_no_device(call: cst.Call, keyword: str) -> bool:
    """Whether ``call`` passes no device (no positional argument, no ``keyword=``, no ``**``)."""
    return not any(
        arg.keyword is None or arg.keyword.value == keyword or arg.star for arg in call.args
    )


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


class _Porter(cst.CSTTransformer):
    """Plans rewrites on the way down (where context is known) and applies them on the way up."""

    def __init__(
        self, aliases: dict[str, str], index_names: Callable[[], IndexNames] = lambda: NO_NAMES
    ) -> None:
        super().__init__()
        self.aliases = aliases
        self.index_names = index_names  # the file's, read when a name's kind is first needed
        self.rewrites = 0
        self.used_torch = False
        self.helpers: set[str] = set()  # names of anyaccel.distributed the port wrote
        self._process_counts: set[int] = set()  # ids of device counts that count processes
        self._accelerator_names: set[str] = set()  # names bound to current_accelerator()
        self._created_guards: set[int] = set()  # ids of the ``if ... == "cuda":`` we wrote
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

    def visit_Import(self, node: cst.Import) -> bool:
        return False  # "import torch.cuda.nccl as n" names a module: never a call to rewrite

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_ConcatenatedString(self, node: cst.ConcatenatedString) -> bool:
        return False  # implicit concatenation: not a device string on its own

    # ------------------------------------------------------------------ planning
    def visit_Assign(self, node: cst.Assign) -> None:
        names = [_last_name(t.target) for t in node.targets]
        if all(n is not None and PROCESS_COUNT_NAME.search(n) for n in names):
            self._process_counts.add(id(node.value))
        if (
            len(node.targets) == 1
            and isinstance(node.targets[0].target, cst.Name)
            and isinstance(node.value, cst.Call)
            and self.qualified(node.value.func) == _CURRENT_ACCELERATOR
        ):
            self._accelerator_names.add(node.targets[0].target.value)

    def _written(self, target: cst.BaseExpression) -> None:
        """``x.is_cuda = ...`` sets an attribute: not the read ACC031 ports."""
        if isinstance(target, cst.Attribute) and target.attr.value == "is_cuda":
            self._handled.add(id(target))

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._written(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._written(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._written(node.target)
        name = _last_name(node.target)
        if node.value is not None and name is not None and PROCESS_COUNT_NAME.search(name):
            self._process_counts.add(id(node.value))

    def visit_Call(self, node: cst.Call) -> None:
        if self._frozen:
            return
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value in PROCESS_COUNT_KEYWORDS:
                self._process_counts.add(id(arg.value))
        func = node.func
        if self.qualified(func) == "torch.device" and len(node.args) == 1:
            self._device_positions.add(id(node.args[0].value))
        if isinstance(func, cst.Attribute) and func.attr.value == "is_cuda":
            self._handled.add(id(func))  # x.is_cuda() is some object's method, not the property
        is_to = isinstance(func, cst.Attribute) and func.attr.value == "to"
        if is_to and node.args and node.args[0].keyword is None:
            self._device_positions.add(id(node.args[0].value))
        fsdp = _is_fsdp(self.qualified(func))
        if is_lightning_entry(self.qualified(func)):
            for arg in node.args:  # Lightning's accelerator="cuda" is its name, not a device
                if arg.keyword is not None and arg.keyword.value == "accelerator":
                    self._handled.add(id(arg.value))
        for arg in node.args:
            if arg.keyword is not None and (
                arg.keyword.value in _DEVICE_KEYWORDS or (fsdp and arg.keyword.value == "device_id")
            ):
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
        ported = self._port_call(original_node, updated_node, qualified)
        if ported is not None:
            return ported
        if qualified == "torch.cuda.current_device" and not original_node.args:
            self.rewrites += 1
            self._note_import(func)
            as_device = id(original_node) in self._device_positions
            return _accelerator("current_device_name" if as_device else "current_device")
        if qualified == "torch.cuda.amp.autocast":
            return self._autocast(func, updated_node)
        if qualified == "torch.cuda.amp.GradScaler":
            scaler = self._scaler(original_node, updated_node.args, first=0)
            if scaler is None:
                return updated_node  # *args or too many: leave to the user
            self.rewrites += 1
            self._note_import(func)
            self.used_torch = True
            device = cst.Arg(_accelerator("device_name"))
            return updated_node.with_changes(
                func=cst.parse_expression("torch.amp.GradScaler"), args=[device, *scaler]
            )
        if qualified is not None and qualified.rsplit(".", 1)[-1] == "DataLoader":
            pinned = self._pin_memory_applies(updated_node)
            if pinned is not None:
                return pinned
        if qualified in _DEVICE_AUTOCASTS and _names_cuda(original_node, "device_type"):
            return self._device_autocast(original_node, updated_node)
        if qualified in _DEVICE_SCALERS and _names_cuda(original_node, "device"):
            split = _split_device(updated_node.args, "device")
            scaler = None if split is None else self._scaler(original_node, split[1], first=1)
            if split is not None and scaler is not None:
                self.rewrites += 1
                return updated_node.with_changes(args=[_plain(split[0]), *scaler])
        if qualified in _DEVICE_SCALERS and _names_no_device(original_node, "device"):
            scaler = self._scaler(original_node, updated_node.args, first=1)
            if scaler is not None:  # torch's default device is "cuda"
                self.rewrites += 1
                device = cst.Arg(_accelerator("device_name"))
                return updated_node.with_changes(args=[device, *scaler])
        if (
            isinstance(func, cst.Attribute)
            and isinstance(updated_node.func, cst.Attribute)  # not already rewritten
            and self.qualified(func.value) != "torch"
        ):
            receiver = updated_node.func.value
            if func.attr.value == "cuda":
                return self._to_device(updated_node, receiver)
            if func.attr.value == "to":
                return self._index_argument(updated_node, positional=True)
            if func.attr.value == "pin_memory" and not original_node.args:
                self.rewrites += 1
                return _accelerator("pin_memory", cst.Arg(receiver))
        return updated_node

    def _port_call(
        self, original: cst.Call, updated: cst.Call, qualified: str | None
    ) -> cst.BaseExpression | None:
        """``original`` rewritten as a whole, or ``None`` when no such rule applies.

        Device counts that count processes, ``torch.accelerator``, DDP's device arguments,
        integer devices passed to ``torch`` and device strings built with ``.format``.
        """
        if (
            qualified in DEVICE_COUNTS
            and id(original) in self._process_counts
            and not original.args
        ):
            self.rewrites += 1
            self._note_import(original.func)
            self.helpers.add("local_process_count")
            return cst.Call(func=cst.Name("local_process_count"))
        if qualified == _CURRENT_ACCELERATOR and not original.args:
            self.rewrites += 1
            self.used_torch = True
            return cst.parse_expression("torch.device(get_accelerator().device_name())")
        method = _ACCELERATOR_CALLS.get(qualified or "")
        if method is not None and not any(a.star for a in original.args):
            if method in ("is_available", "device_count", "current_device") and original.args:
                return None  # torch's optional device-type argument: left for the user
            self.rewrites += 1
            return _accelerator(method, *(_plain(a) for a in updated.args))
        if qualified == "torch.distributed.get_default_backend_for_device":
            if len(original.args) == 1 and self._is_current_accelerator(original.args[0].value):
                self.rewrites += 1
                return _accelerator("communication_backend_name")
            return None
        if qualified is not None and qualified.rsplit(".", 1)[-1] == "DistributedDataParallel":
            return self._ddp(updated)
        if _is_fsdp(qualified):
            indexed = self._index_argument(updated, positional=False, keyword="device_id")
            return indexed if indexed is not updated else None
        if qualified is not None and qualified.startswith("torch."):
            one = qualified == "torch.device" and len(original.args) == 1
            indexed = self._index_argument(updated, positional=one)
            if indexed is not updated:
                return indexed
        if isinstance(original.func, cst.Attribute) and original.func.attr.value == "format":
            return self._runtime_string(original, updated)
        return None

    def _is_current_accelerator(self, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.Name):
            return value.value in self._accelerator_names
        return (
            isinstance(value, cst.Call)
            and not value.args
            and self.qualified(value.func) == _CURRENT_ACCELERATOR
        )

    def _is_index_node(self, value: cst.BaseExpression) -> bool:
        tree = _as_ast(value)
        if tree is None:
            return False
        if isinstance(tree, ast.Constant | ast.Call):
            return is_index(tree)
        return is_index(tree, self.index_names())

    def _index_argument(
        self, call: cst.Call, *, positional: bool, keyword: str = "device"
    ) -> cst.Call:
        """``call`` with its device argument (first or ``keyword=``) wrapped in ``device_name``."""
        args = list(call.args)
        for position, arg in enumerate(args):
            first = positional and position == 0 and arg.keyword is None and not arg.star
            if first or (arg.keyword is not None and arg.keyword.value == keyword):
                if not self._is_index_node(arg.value):
                    return call
                self.rewrites += 1
                value = _accelerator("device_name", cst.Arg(arg.value))
                args[position] = arg.with_changes(value=value)
                return call.with_changes(args=args)
        return call

    def _ddp(self, call: cst.Call) -> cst.Call:
        """DDP's ``device_ids=[i]`` and ``output_device=x`` through the placement helpers.

        DDP's own arguments (positions 1 and 2, or by keyword); a list of several devices is
        left to the user.
        """
        args = list(call.args)
        for position, arg in enumerate(args):
            name = arg.keyword.value if arg.keyword is not None else None
            if arg.star or (name is None and position not in (1, 2)):
                continue
            if name == "device_ids" or (name is None and position == 1):
                value = arg.value
                if not isinstance(value, cst.List | cst.Tuple) or len(value.elements) != 1:
                    continue
                element = value.elements[0]
                if isinstance(element, cst.StarredElement):
                    continue
                helper, inner = "ddp_device_ids", element.value
            elif name == "output_device" or (name is None and position == 2):
                inner = arg.value
                if (isinstance(inner, cst.Name) and inner.value == "None") or (
                    isinstance(inner, cst.Call) and _last_name(inner.func) == "ddp_output_device"
                ):
                    continue
                helper = "ddp_output_device"
            else:
                continue
            self.rewrites += 1
            self.helpers.add(helper)
            wrapped = cst.Call(func=cst.Name(helper), args=[cst.Arg(inner)])
            args[position] = arg.with_changes(value=wrapped)
        return call.with_changes(args=args)

    def _runtime_string(
        self, original: cst.BaseExpression, updated: cst.BaseExpression
    ) -> cst.BaseExpression | None:
        """``"cuda:{}".format(i)``, ``"cuda:%d" % i``, ``"cuda:" + str(i)``: ``device_name(i)``."""
        tree = _as_ast(original)
        if tree is None or runtime_device_index(tree) is None:
            return None
        index: cst.BaseExpression
        if isinstance(updated, cst.Call):
            index = updated.args[0].value
        elif isinstance(updated, cst.BinaryOperation):
            right = updated.right
            if isinstance(right, cst.Tuple):
                index = right.elements[0].value
            elif isinstance(right, cst.Call) and isinstance(updated.operator, cst.Add):
                index = right.args[0].value
            else:
                index = right
        else:  # pragma: no cover - runtime_device_index knows no other form
            return None
        self.rewrites += 1
        return _accelerator("device_name", cst.Arg(index))

    def leave_BinaryOperation(
        self, original_node: cst.BinaryOperation, updated_node: cst.BinaryOperation
    ) -> cst.BaseExpression:
        if self._frozen:
            return updated_node
        return self._runtime_string(original_node, updated_node) or updated_node

    def _autocast(self, func: cst.BaseExpression, call: cst.Call) -> cst.BaseExpression:
        args = _by_keyword(call.args, _AUTOCAST_PARAMETERS)
        if args is None:
            return call  # *args or too many: leave to the user
        args = self._honest_dtype(call, args)
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

    def _pin_memory_applies(self, call: cst.Call) -> cst.Call | None:
        """``DataLoader(pin_memory=True)``: pin where the accelerator says pinning applies."""
        for position, arg in enumerate(call.args):
            value = arg.value
            if (
                arg.keyword is not None
                and arg.keyword.value == "pin_memory"
                and isinstance(value, cst.Name)
                and value.value == "True"
            ):
                self.rewrites += 1
                args = list(call.args)
                args[position] = arg.with_changes(value=_accelerator("pin_memory_applies"))
                return call.with_changes(args=args)
        return None

    def _honest_dtype(self, call: cst.Call, args: list[cst.Arg]) -> list[cst.Arg]:
        """``args`` with ``dtype=`` through ``autocast_dtype``: float16 when none was given."""
        if any(
            a.keyword is not None
            and a.keyword.value == "enabled"
            and isinstance(a.value, cst.Name)
            and a.value.value == "False"
            for a in args
        ):
            return args  # autocast turned off: no dtype is at stake
        self.helpers.add("autocast_dtype")
        self.used_torch = True
        for position, arg in enumerate(args):
            if arg.keyword is not None and arg.keyword.value == "dtype":
                dtype = cst.Call(func=cst.Name("autocast_dtype"), args=[cst.Arg(arg.value)])
                return [*args[:position], arg.with_changes(value=dtype), *args[position + 1 :]]
        half = cst.Call(
            func=cst.Name("autocast_dtype"), args=[cst.Arg(cst.parse_expression("torch.float16"))]
        )
        return [*(_plain(a) for a in args), _keyword("dtype", half)]

    def _device_autocast(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        """``torch.autocast("cuda")`` meant CUDA's float16: ``dtype=autocast_dtype(...)``."""
        split = _split_device(updated.args, "device_type")
        if split is None:
            return updated
        device, rest = split
        keyed = _by_keyword(rest, ("dtype", "enabled", "cache_enabled"))
        if keyed is None:
            return updated
        self.rewrites += 1
        return updated.with_changes(args=[device, *self._honest_dtype(original, keyed)])

    def _scaler(
        self, original: cst.Call, args: Sequence[cst.Arg], first: int
    ) -> list[cst.Arg] | None:
        """A CUDA scaler's arguments (after its device) with ``enabled`` only where fp16 runs."""
        keyed = _by_keyword(args, _SCALER_PARAMETERS)
        if keyed is None:
            return None
        applies: cst.BaseExpression = cst.Call(func=cst.Name("grad_scaler_applies"))
        rest = []
        for arg in keyed:
            if arg.keyword is not None and arg.keyword.value == "enabled":
                simple = isinstance(arg.value, cst.Name | cst.Attribute | cst.Call | cst.Subscript)
                value = arg.value
                if not simple and not value.lpar:
                    value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                applies = cst.BooleanOperation(left=applies, operator=cst.And(), right=value)
            else:
                rest.append(_plain(arg))
        self.helpers.add("grad_scaler_applies")
        return [*rest, _keyword("enabled", applies)]

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
        if self._frozen or id(original_node) in self._handled:
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
        porter = _Porter(aliases, names)
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

    def add(self, porter: _Porter) -> None:
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
    text: str, config: cst.PartialParserConfig, porter: _Porter, path: str, line: int
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
            and all(_configures_cuda(s, aliases) for s in (*previous.statements, *chunk.statements))
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


def _configures_cuda(statement: ast.stmt, aliases: dict[str, str]) -> bool:
    """The stdlib twin of ``_Porter._configures_cuda``: a statement the port guards."""
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        targets = [statement.value.func]
    elif isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, ast.AugAssign):
        targets = [statement.target]
    else:
        return False
    for target in targets:
        parts: list[str] = []
        node = target
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or not parts:
            return False
        parts.append(aliases.get(node.id, node.id))
        kind = classify(".".join(reversed(parts)))
        if kind is None or kind[0] not in _GUARDABLE:
            return False
    return True


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
