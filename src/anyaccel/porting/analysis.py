"""What the porting rules read from a parsed file: imports, index names, device strings, guards.

One place for the analysis every rule shares, in stdlib ``ast`` (``anyaccel check`` never
imports libcst; ``anyaccel port`` asks these questions of libcst nodes through their source).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import NamedTuple

__all__ = [
    "BLOCKS",
    "INDEX_NAME",
    "NO_NAMES",
    "ImportedName",
    "IndexNames",
    "import_aliases",
    "index_names",
    "is_cuda_fstring",
    "is_cuda_guard",
    "is_index",
    "is_lightning_entry",
    "keyword_value",
    "last_name",
    "object_method",
    "qualified_name",
    "runtime_device_index",
    "statement_blocks",
]

#: ``"cuda:{}".format(i)`` and ``"cuda:%d" % i``: a device string built from one index.
_FORMAT_TEMPLATE = re.compile(r"cuda:\{0?(?::d)?\}")
_PERCENT_TEMPLATE = re.compile(r"cuda:%[dis]")
#: Fields of compound statements that hold nested statement blocks.
BLOCKS = frozenset({"body", "orelse", "finalbody", "handlers", "cases"})


class ImportedName(NamedTuple):
    """How a local name was imported: ``(module, object or None, alias or None)``."""

    module: str
    name: str | None
    asname: str | None


def object_method(call: ast.Call, aliases: dict[str, str]) -> str | None:
    """``m`` of a call ``x.m(...)`` where ``x`` is not the ``torch`` module itself."""
    func = call.func
    if isinstance(func, ast.Attribute) and qualified_name(func.value, aliases) != "torch":
        return func.attr
    return None


def statement_blocks(node: ast.AST) -> list[list[ast.stmt]]:
    """The statement blocks nested in ``node`` (bodies, else, finally, handlers, cases)."""
    blocks: list[list[ast.stmt]] = []
    for name in BLOCKS:
        value = getattr(node, name, None)
        if not value:
            continue
        if name in ("handlers", "cases"):
            blocks.extend(item.body for item in value)
        else:
            blocks.append(value)
    return blocks


def import_aliases(
    statements: list[ast.stmt],
) -> tuple[dict[str, str], dict[str, ImportedName]]:
    """Local name -> the dotted name it was imported as (``tc`` -> ``torch.cuda``), and how.

    Every import statement counts, nested ones too, in source order (a later one wins).
    """
    aliases: dict[str, str] = {}
    imports: dict[str, ImportedName] = {}

    def collect(block: list[ast.stmt]) -> None:
        for node in block:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        aliases[alias.asname] = alias.name
                        imports[alias.asname] = ImportedName(alias.name, None, alias.asname)
                    else:
                        top = alias.name.split(".")[0]
                        aliases[top] = top
            elif isinstance(node, ast.ImportFrom):
                if node.module and not node.level:
                    for alias in node.names:
                        if alias.name != "*":
                            local = alias.asname or alias.name
                            aliases[local] = f"{node.module}.{alias.name}"
                            imports[local] = ImportedName(node.module, alias.name, alias.asname)
            else:
                for inner in statement_blocks(node):
                    collect(inner)

    collect(statements)
    return aliases, imports


def qualified_name(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """``torch.cuda.synchronize`` for ``tc.synchronize`` after ``import torch.cuda as tc``."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(aliases.get(node.id, node.id))
    return ".".join(reversed(parts))


#: Names that visibly hold a device index (``gpu``, ``args.gpu``, ``self.gpu_id``, ``local_rank``).
INDEX_NAME = re.compile(
    r"(?:ddp_|local_|global_|world_|node_)*rank|(?:local_)?gpu(?:_id|_idx|_index)?|"
    r"(?:local_)?device_(?:id|idx|index|ordinal)"
)

#: Environment variables whose integer value is a rank (``int(os.environ["LOCAL_RANK"])``).
_RANK_VARIABLE = re.compile(r"RANK|LOCALID")


class IndexNames(NamedTuple):
    """What a file says about its names: bound only to ints, or declared as something else."""

    ints: frozenset[str] = frozenset()
    #: Annotated without ``int`` (``device_id: torch.device``): never an index, whatever its name.
    not_ints: frozenset[str] = frozenset()


#: A file's ``IndexNames`` when nothing is known about it.
NO_NAMES = IndexNames()


#: Lightning's packages, whose ``Trainer`` and ``Fabric`` take ``accelerator=``.
_LIGHTNING_PACKAGES = ("lightning", "pytorch_lightning", "lightning_fabric")


def is_lightning_entry(qualified: str | None) -> bool:
    """Whether ``qualified`` is a Lightning ``Trainer`` or ``Fabric`` (as the file imported it)."""
    if qualified is None:
        return False
    head, _, last = qualified.rpartition(".")
    return last in ("Trainer", "Fabric") and head.split(".")[0] in _LIGHTNING_PACKAGES


def keyword_value(call: ast.Call, name: str) -> ast.expr | None:
    """The value of ``call``'s keyword argument ``name``, if passed."""
    return next((k.value for k in call.keywords if k.arg == name), None)


def last_name(node: ast.expr) -> str | None:
    """``c`` of ``a.b.c``, ``x`` of ``x``; ``None`` for anything else."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def is_index(value: ast.expr, names: IndexNames = NO_NAMES) -> bool:
    """Whether ``value`` visibly is an integer device index (never a dtype, tensor or device).

    An int literal, ``int(...)``, a name like ``gpu``/``args.gpu``/``self.gpu_id``/
    ``local_rank`` (the whole last part matches ``INDEX_NAME``) unless the file annotates it
    as something else, or one of ``names.ints`` (only ever assigned integers).
    """
    if isinstance(value, ast.Constant):
        return isinstance(value.value, int) and not isinstance(value.value, bool)
    if isinstance(value, ast.Call):
        return isinstance(value.func, ast.Name) and value.func.id == "int"
    name = last_name(value)
    if name is None or name in names.not_ints:
        return False
    return INDEX_NAME.fullmatch(name) is not None or name in names.ints


def _int_source(value: ast.expr) -> bool:
    """An int literal, or ``int(...)`` of a rank variable (``int(os.environ["LOCAL_RANK"])``)."""
    if isinstance(value, ast.Constant):
        return isinstance(value.value, int) and not isinstance(value.value, bool)
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "int"
        and len(value.args) == 1
        and any(
            isinstance(n, ast.Constant)
            and isinstance(n.value, str)
            and _RANK_VARIABLE.search(n.value) is not None
            for n in ast.walk(value.args[0])
        )
    )


def _mentions_int(annotation: ast.expr) -> bool:
    """Whether an annotation names ``int`` (``int``, ``int | None``, ``"Optional[int]"``)."""
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id == "int":
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "int" in node.value:
            return True
    return False


def _statements(tree: ast.Module) -> Iterator[ast.stmt]:
    """Every statement of ``tree``, nested blocks included (expressions are not descended)."""
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        statement = stack.pop()
        yield statement
        for field in BLOCKS:
            for item in getattr(statement, field, None) or ():
                if isinstance(item, ast.stmt):
                    stack.append(item)
                else:  # an except handler or a match case
                    stack.extend(item.body)


def _parameters(arguments: ast.arguments) -> list[ast.arg]:
    return [
        *arguments.posonlyargs,
        *arguments.args,
        *arguments.kwonlyargs,
        *(a for a in (arguments.vararg, arguments.kwarg) if a is not None),
    ]


def index_names(tree: ast.Module) -> IndexNames:
    """Names (and attribute names) ``tree`` only binds to integers, or annotates as non-ints.

    Ints: ``device = 0`` or ``self.rank_id = int(os.environ["LOCAL_RANK"])``, with no other
    binding of that name in the file's statements and no parameter of that name (a parameter
    may hold anything). Non-ints: a parameter or variable annotated without ``int``
    (``device_id: torch.device | None``). Statements are read, not expressions: a lambda's
    parameters and names bound inside comprehensions or by ``:=`` are not seen.
    """
    verdict: dict[str, bool] = {}
    not_ints: set[str] = set()

    def rebound(target: ast.expr) -> None:
        for inner in ast.walk(target):
            if isinstance(inner, ast.expr) and (name := last_name(inner)) is not None:
                verdict[name] = False

    for node in _statements(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for parameter in _parameters(node.args):
                verdict[parameter.arg] = False
                annotation = parameter.annotation
                if annotation is not None and not _mentions_int(annotation):
                    not_ints.add(parameter.arg)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            value = node.value
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if isinstance(node, ast.AnnAssign) and not _mentions_int(node.annotation):
                name = last_name(node.target)
                if name is not None:
                    not_ints.add(name)
            for target in targets:
                name = last_name(target)
                if name is None:
                    rebound(target)
                else:
                    is_int = value is not None and _int_source(value)
                    verdict[name] = verdict.get(name, True) and is_int
        elif isinstance(node, ast.AugAssign | ast.For | ast.AsyncFor):
            rebound(node.target)
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                if item.optional_vars is not None:
                    rebound(item.optional_vars)
    ints = frozenset(name for name, only_ints in verdict.items() if only_ints)
    return IndexNames(ints, frozenset(not_ints))


def runtime_device_index(node: ast.expr) -> ast.expr | None:
    """The index of a CUDA device string built at run time, or ``None``.

    ``"cuda:{}".format(i)``, ``"cuda:%d" % i`` (or ``% (i,)``) and ``"cuda:" + str(i)``.
    """
    if isinstance(node, ast.Call):
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "format"
            and isinstance(func.value, ast.Constant)
            and isinstance(func.value.value, str)
            and _FORMAT_TEMPLATE.fullmatch(func.value.value)
            and len(node.args) == 1
            and not isinstance(node.args[0], ast.Starred)
            and not node.keywords
        ):
            return node.args[0]
        return None
    if not (
        isinstance(node, ast.BinOp)
        and isinstance(node.left, ast.Constant)
        and isinstance(node.left.value, str)
    ):
        return None
    template, right = node.left.value, node.right
    if isinstance(node.op, ast.Mod) and _PERCENT_TEMPLATE.fullmatch(template):
        if isinstance(right, ast.Tuple):
            one = len(right.elts) == 1 and not isinstance(right.elts[0], ast.Starred)
            return right.elts[0] if one else None
        return None if isinstance(right, ast.Dict) else right
    if (
        isinstance(node.op, ast.Add)
        and template == "cuda:"
        and isinstance(right, ast.Call)
        and isinstance(right.func, ast.Name)
        and right.func.id == "str"
        and len(right.args) == 1
        and not right.keywords
    ):
        return right.args[0]
    return None


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
