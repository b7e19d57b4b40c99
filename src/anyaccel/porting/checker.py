"""``anyaccel check``'s engine: find CUDA-specific code in Python source by parsing it.

Stdlib ``ast`` only, and a file without any trigger word (``cud``, ``nccl``, ``pin_memory``,
``.to(``, ``device_ids``...) is not even parsed, so a pre-commit run over thousands of files
stays fast.
"""

from __future__ import annotations

import ast
import bisect
import functools
import re
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from anyaccel.porting.rules import ACCELERATOR_PORTS, CUDA_ALIASES, RULES, portable_cuda_names

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
    r"(?=[cCnpadoD.])(?:"  # each alternative's first letter: most positions fail at once
    r"cud|CUD|nccl|pin_memory|\baccelerator\b|default_backend_for_device|device_ids|"
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
_DEVICE_STRING = re.compile(r"cuda(?::\d+)?")
#: ``"cuda:{}".format(i)`` and ``"cuda:%d" % i``: a device string built from one index.
_FORMAT_TEMPLATE = re.compile(r"cuda:\{0?(?::d)?\}")
_PERCENT_TEMPLATE = re.compile(r"cuda:%[dis]")
#: Names that visibly hold a device index (``gpu``, ``args.gpu``, ``self.gpu_id``, ``local_rank``).
INDEX_NAME = re.compile(
    r"(?:ddp_|local_|global_|world_|node_)*rank|(?:local_)?gpu(?:_id|_idx|_index)?|"
    r"(?:local_)?device_(?:id|idx|index|ordinal)"
)
#: Environment variables whose integer value is a rank (``int(os.environ["LOCAL_RANK"])``).
_RANK_VARIABLE = re.compile(r"RANK|LOCALID")
#: Names a device count is a process count under (``world_size = torch.cuda.device_count()``).
PROCESS_COUNT_NAME = re.compile(
    r"(?:^|_)(?:world_size|nprocs?|nproc_per_node|ngpus?|ngpus_per_node|n_gpus?|num_gpus|"
    r"gpus_per_node|gpu_count|num_processes)$"
)
#: Keyword arguments that take a process count (``mp.spawn(main, nprocs=...)``).
PROCESS_COUNT_KEYWORDS = frozenset({"nprocs", "nproc", "nproc_per_node", "world_size"})
#: The device counts that read as a process count in those places.
DEVICE_COUNTS = frozenset({"torch.cuda.device_count", "torch.accelerator.device_count"})


class IndexNames(NamedTuple):
    """What a file says about its names: bound only to ints, or declared as something else."""

    ints: frozenset[str] = frozenset()
    #: Annotated without ``int`` (``device_id: torch.device``): never an index, whatever its name.
    not_ints: frozenset[str] = frozenset()


#: A file's ``IndexNames`` when nothing is known about it.
NO_NAMES = IndexNames()


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
    if qualified == "torch.accelerator" or qualified.startswith("torch.accelerator."):
        member = qualified[len("torch.accelerator.") :].split(".")[0]
        if member == "current_accelerator":
            return "ACC050", "torch.device(get_accelerator().device_name())"
        if member in ACCELERATOR_PORTS:
            return "ACC050", f"get_accelerator().{ACCELERATOR_PORTS[member]}()"
        return "ACC050", "port it by hand to get_accelerator()'s contract (docs/porting.md)"
    if qualified == "torch.distributed.get_default_backend_for_device":
        return "ACC051", ""
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

    def __init__(self, trigger_lines: list[int], tree: ast.Module) -> None:
        self.trigger_lines = trigger_lines
        self.tree = tree
        self.aliases: dict[str, str] = {}
        self.found: list[tuple[ast.expr, str, str, str]] = []  # node, code, name, attr
        self.process_counts: set[int] = set()  # ids of device counts used as process counts
        self.lightning_names: set[int] = set()  # ids of Lightning accelerator="cuda"/"gpu"

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

    def visit_Assign(self, node: ast.Assign) -> None:
        if all(_counts_processes(target) for target in node.targets):
            self._mark_process_count(node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None and _counts_processes(node.target):
            self._mark_process_count(node.value)
        self.generic_visit(node)

    def _mark_process_count(self, value: ast.expr) -> None:
        if (
            isinstance(value, ast.Call)
            and not value.args
            and not value.keywords
            and self.qualified_name(value.func) in DEVICE_COUNTS
        ):
            self.process_counts.add(id(value.func))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        qualified = self.qualified_name(node)
        if id(node) in self.process_counts:
            self.found.append((node, "ACC045", f"{qualified}()", ""))
            return
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
        if id(node) in self.process_counts:
            self.found.append((node, "ACC045", f"{qualified}()", ""))
        elif qualified is not None and qualified != node.id:
            kind = classify(qualified)
            if kind is not None:
                self.found.append((node, kind[0], qualified, kind[1]))

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        qualified = self.qualified_name(func)
        if isinstance(func, ast.Attribute) and self.qualified_name(func.value) != "torch":
            if func.attr == "cuda":
                self.found.append((node, "ACC030", ".cuda()", ""))
            elif func.attr == "pin_memory" and not node.args and not node.keywords:
                self.found.append((node, "ACC032", ".pin_memory()", ""))
            elif func.attr == "to":
                self._index_as_device(node.args[0] if node.args else _keyword(node, "device"))
            elif func.attr == "format" and runtime_device_index(node) is not None:
                self.found.append((node, "ACC040", "'cuda:{}'.format(...)", ""))
        if qualified == "torch.device" and len(node.args) == 1 and not node.keywords:
            self._index_as_device(node.args[0])
        elif qualified is not None and qualified.startswith("torch."):
            self._index_as_device(_keyword(node, "device"))
        if qualified is not None and qualified.rsplit(".", 1)[-1] == "DistributedDataParallel":
            self._ddp(node)
        if qualified is not None and qualified.rsplit(".", 1)[-1] == "DataLoader":
            pinned = _keyword(node, "pin_memory")
            if isinstance(pinned, ast.Constant) and pinned.value is True:
                self.found.append((pinned, "ACC033", "pin_memory=True", ""))
        if is_lightning_entry(qualified):
            chosen = _keyword(node, "accelerator")
            if isinstance(chosen, ast.Constant) and chosen.value in ("gpu", "cuda"):
                self.found.append((chosen, "ACC046", f"accelerator={chosen.value!r}", ""))
                self.lightning_names.add(id(chosen))  # Lightning's name, not a device string
        if qualified is not None and qualified.rsplit(".", 1)[-1] == "FullyShardedDataParallel":
            self._index_as_device(_keyword(node, "device_id"))  # FSDP's device, as torch.device
        for keyword in node.keywords:
            if keyword.arg in PROCESS_COUNT_KEYWORDS:
                self._mark_process_count(keyword.value)
        self.generic_visit(node)

    def _index_as_device(self, value: ast.expr | None) -> None:
        """Report ``value`` if it is visibly an integer index passed where a device goes."""
        if value is None or isinstance(value, ast.Constant | ast.Call):
            found = value is not None and is_index(value)
        else:  # a name: what the file binds it to decides (read once, when first needed)
            found = _last_name(value) is not None and is_index(value, self.index_names)
        if found and value is not None:
            text = ast.unparse(value)
            self.found.append((value, "ACC043", text, text))

    @functools.cached_property
    def index_names(self) -> IndexNames:
        return index_names(self.tree)

    def _ddp(self, node: ast.Call) -> None:
        """``device_ids=[i]`` and ``output_device=i`` of a ``DistributedDataParallel(...)``."""
        ids = node.args[1] if len(node.args) > 1 else _keyword(node, "device_ids")
        if isinstance(ids, ast.List | ast.Tuple) and ids.elts:
            (first, *more) = ids.elts
            if more or isinstance(first, ast.Starred):
                fix = "one ddp_device_ids(i) per process: a list on an accelerator, None on the CPU"
            else:
                fix = f"device_ids=anyaccel.distributed.ddp_device_ids({ast.unparse(first)})"
            self.found.append((ids, "ACC044", "device_ids", fix))
        output = node.args[2] if len(node.args) > 2 else _keyword(node, "output_device")
        if output is None or (isinstance(output, ast.Constant) and output.value is None):
            return
        if isinstance(output, ast.Call) and _last_name(output.func) == "ddp_output_device":
            return
        fix = f"output_device=anyaccel.distributed.ddp_output_device({ast.unparse(output)})"
        self.found.append((output, "ACC044", "output_device", fix))

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if runtime_device_index(node) is not None:
            self.found.append((node, "ACC040", repr(ast.unparse(node)), ""))
            return
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
        if runtime_device_index(node) is not None or (
            isinstance(node, ast.JoinedStr) and is_cuda_fstring(node)
        ):
            return  # {"cuda:%d" % 0: ...}: where a storage was saved, a label too
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            self.visit(node)
        elif node.value == "CUDA_VISIBLE_DEVICES":  # an environment key is what matters here
            self.found.append((node, "ACC042", "'CUDA_VISIBLE_DEVICES'", ""))

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if not isinstance(value, str) or id(node) in self.lightning_names:
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


#: Lightning's packages, whose ``Trainer`` and ``Fabric`` take ``accelerator=``.
_LIGHTNING_PACKAGES = ("lightning", "pytorch_lightning", "lightning_fabric")


def is_lightning_entry(qualified: str | None) -> bool:
    """Whether ``qualified`` is a Lightning ``Trainer`` or ``Fabric`` (as the file imported it)."""
    if qualified is None:
        return False
    head, _, last = qualified.rpartition(".")
    return last in ("Trainer", "Fabric") and head.split(".")[0] in _LIGHTNING_PACKAGES


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    """The value of ``call``'s keyword argument ``name``, if passed."""
    return next((k.value for k in call.keywords if k.arg == name), None)


def _last_name(node: ast.expr) -> str | None:
    """``c`` of ``a.b.c``, ``x`` of ``x``; ``None`` for anything else."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _counts_processes(target: ast.expr) -> bool:
    name = _last_name(target)
    return name is not None and PROCESS_COUNT_NAME.search(name) is not None


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
    name = _last_name(value)
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
        for field in _BLOCKS:
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
            if isinstance(inner, ast.expr) and (name := _last_name(inner)) is not None:
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
                name = _last_name(node.target)
                if name is not None:
                    not_ints.add(name)
            for target in targets:
                name = _last_name(target)
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
    visitor = _Visitor(trigger_lines(source, TRIGGER), tree)
    visitor.collect_aliases(tree.body)
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
