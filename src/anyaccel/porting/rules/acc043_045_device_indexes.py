"""Integers used as devices: ``x.to(0)`` (ACC043), DDP's device ids (ACC044), device counts
that count processes (ACC045)."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from anyaccel.porting.analysis import is_index, keyword_value, last_name, object_method
from anyaccel.porting.rule import Invalid, PortingRule, Scope

if TYPE_CHECKING:
    import libcst as cst

    from anyaccel.porting.rewriting import Rewriter

__all__ = [
    "DEVICE_COUNTS",
    "PROCESS_COUNT_KEYWORDS",
    "PROCESS_COUNT_NAME",
    "DdpDeviceIds",
    "DeviceCountAsProcessCount",
    "IntDeviceOrdinal",
]

#: Names a device count is a process count under (``world_size = torch.cuda.device_count()``).
PROCESS_COUNT_NAME = re.compile(
    r"(?:^|_)(?:world_size|nprocs?|nproc_per_node|ngpus?|ngpus_per_node|n_gpus?|num_gpus|"
    r"gpus_per_node|gpu_count|num_processes)$"
)
#: Keyword arguments that take a process count (``mp.spawn(main, nprocs=...)``).
PROCESS_COUNT_KEYWORDS = frozenset({"nprocs", "nproc", "nproc_per_node", "world_size"})
#: FSDP's wrapper, whose ``device_id=`` is read as ``torch.device(index)``.
_FSDP = "FullyShardedDataParallel"
#: The device counts that read as a process count in those places.
DEVICE_COUNTS = frozenset({"torch.cuda.device_count", "torch.accelerator.device_count"})


class IntDeviceOrdinal(PortingRule):
    """An integer index where torch takes a device: ``get_accelerator().device_name(i)``."""

    code = "ACC043"
    call_rank = 50
    name = "int-device-ordinal"
    message = (
        "the integer {name} is used as a device; without CUDA torch reads it as an "
        "accelerator that does not exist"
    )
    suggestion = "get_accelerator().device_name({attr})"
    portable = True
    VALID = (
        "y = x.to(torch.float16)\n",
        "y = x.to(device)\n",
        "device = 0\ndevice = 'cpu'\nmodel.to(device)\n",
        "def f(device_id: torch.device | None):\n    return x.to(device_id)\n",
    )
    INVALID = (
        Invalid(
            "y = x.to(0)\n",
            "from anyaccel import get_accelerator\n\ny = x.to(get_accelerator().device_name(0))\n",
        ),
        Invalid(
            "import torch\nt = torch.zeros(2, device=local_rank)\n",
            "import torch\nfrom anyaccel import get_accelerator\n\n"
            "t = torch.zeros(2, device=get_accelerator().device_name(local_rank))\n",
        ),
        Invalid(
            "import torch\nd = torch.device(args.gpu)\n",
            "import torch\nfrom anyaccel import get_accelerator\n\n"
            "d = torch.device(get_accelerator().device_name(args.gpu))\n",
        ),
        Invalid(
            "m = FullyShardedDataParallel(m, device_id=rank)\n",
            "from anyaccel import get_accelerator\n\n"
            "m = FullyShardedDataParallel(m, device_id=get_accelerator().device_name(rank))\n",
        ),
    )

    def visit_Call(self, node: ast.Call, scope: Scope) -> bool:
        func = node.func
        qualified = scope.qualified_name(func)
        if object_method(node, scope.aliases) == "to":
            self._index_as_device(
                node.args[0] if node.args else keyword_value(node, "device"), scope
            )
        if qualified == "torch.device" and len(node.args) == 1 and not node.keywords:
            self._index_as_device(node.args[0], scope)
        elif qualified is not None and qualified.startswith("torch."):
            self._index_as_device(keyword_value(node, "device"), scope)
        if qualified is not None and qualified.rsplit(".", 1)[-1] == _FSDP:
            self._index_as_device(keyword_value(node, "device_id"), scope)  # as torch.device
        return False

    def _index_as_device(self, value: ast.expr | None, scope: Scope) -> None:
        """Report ``value`` if it is visibly an integer index passed where a device goes."""
        if value is None or isinstance(value, ast.Constant | ast.Call):
            found = value is not None and is_index(value)
        else:  # a name: what the file binds it to decides (read once, when first needed)
            found = last_name(value) is not None and is_index(value, scope.index_names)
        if found and value is not None:
            text = ast.unparse(value)
            scope.report(value, self.code, text, text)

    def rewrite_Call(
        self, original: cst.Call, updated: cst.Call, porter: Rewriter
    ) -> cst.BaseExpression | None:
        """An index passed where a device goes: ``get_accelerator().device_name(i)``."""
        from anyaccel.porting.rewriting import called_method

        qualified = porter.qualified(original.func)
        if qualified is not None and qualified.rsplit(".", 1)[-1] == _FSDP:
            indexed = self._index_argument(updated, porter, positional=False, name="device_id")
            return indexed if indexed is not updated else None
        if qualified is not None and qualified.startswith("torch."):
            one = qualified == "torch.device" and len(original.args) == 1
            indexed = self._index_argument(updated, porter, positional=one)
            if indexed is not updated:
                return indexed
        if called_method(original, updated, porter) == "to":
            return self._index_argument(updated, porter, positional=True)
        return None

    @staticmethod
    def _index_argument(
        call: cst.Call, porter: Rewriter, *, positional: bool, name: str = "device"
    ) -> cst.Call:
        """``call`` with its device argument (first or ``name=``) wrapped in ``device_name``."""
        import libcst as cst

        from anyaccel.porting.rewriting import accelerator, as_ast

        args = list(call.args)
        for position, arg in enumerate(args):
            first = positional and position == 0 and arg.keyword is None and not arg.star
            if first or (arg.keyword is not None and arg.keyword.value == name):
                tree = as_ast(arg.value)
                if tree is None:
                    return call
                names = None if isinstance(tree, ast.Constant | ast.Call) else porter.index_names()
                if not (is_index(tree) if names is None else is_index(tree, names)):
                    return call
                porter.rewrote()
                value = accelerator("device_name", cst.Arg(arg.value))
                args[position] = arg.with_changes(value=value)
                return call.with_changes(args=args)
        return call


class DdpDeviceIds(PortingRule):
    """DDP's ``device_ids=[i]`` and ``output_device=i``: the placement helpers decide."""

    code = "ACC044"
    call_rank = 40
    name = "ddp-device-ids"
    message = "DistributedDataParallel's {name} names a device; torch refuses one for a CPU module"
    suggestion = "{attr}"
    portable = True
    VALID = (
        "m = DistributedDataParallel(m, device_ids=ddp_device_ids(rank))\n",
        "m = DistributedDataParallel(m, output_device=None)\n",
    )
    INVALID = (
        Invalid(
            "m = DistributedDataParallel(m, device_ids=[rank])\n",
            "from anyaccel.distributed import ddp_device_ids\n"
            "from anyaccel import get_accelerator\n\n"
            "m = DistributedDataParallel(m, device_ids=ddp_device_ids(rank))\n",
        ),
        Invalid(
            "import torch\nm = torch.nn.parallel.DistributedDataParallel(m, [rank], rank)\n",
            "import torch\nfrom anyaccel.distributed import ddp_device_ids, ddp_output_device\n"
            "from anyaccel import get_accelerator\n\n"
            "m = torch.nn.parallel.DistributedDataParallel(m, ddp_device_ids(rank), "
            "ddp_output_device(rank))\n",
        ),
        Invalid("m = DistributedDataParallel(m, device_ids=[0, 1])\n"),
    )

    def visit_Call(self, node: ast.Call, scope: Scope) -> bool:
        qualified = scope.qualified_name(node.func)
        if qualified is None or qualified.rsplit(".", 1)[-1] != "DistributedDataParallel":
            return False
        ids = node.args[1] if len(node.args) > 1 else keyword_value(node, "device_ids")
        if isinstance(ids, ast.List | ast.Tuple) and ids.elts:
            (first, *more) = ids.elts
            if more or isinstance(first, ast.Starred):
                fix = "one ddp_device_ids(i) per process: a list on an accelerator, None on the CPU"
            else:
                fix = f"device_ids=anyaccel.distributed.ddp_device_ids({ast.unparse(first)})"
            scope.report(ids, self.code, "device_ids", fix)
        output = node.args[2] if len(node.args) > 2 else keyword_value(node, "output_device")
        if output is None or (isinstance(output, ast.Constant) and output.value is None):
            return False
        if isinstance(output, ast.Call) and last_name(output.func) == "ddp_output_device":
            return False
        fix = f"output_device=anyaccel.distributed.ddp_output_device({ast.unparse(output)})"
        scope.report(output, self.code, "output_device", fix)
        return False

    def rewrite_Call(
        self, original: cst.Call, updated: cst.Call, porter: Rewriter
    ) -> cst.BaseExpression | None:
        """DDP's ``device_ids=[i]`` and ``output_device=x`` through the placement helpers.

        DDP's own arguments (positions 1 and 2, or by keyword); a list of several devices is
        left to the user.
        """
        import libcst as cst

        from anyaccel.porting.rewriting import last_name as cst_last_name

        qualified = porter.qualified(original.func)
        if qualified is None or qualified.rsplit(".", 1)[-1] != "DistributedDataParallel":
            return None
        args = list(updated.args)
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
                    isinstance(inner, cst.Call) and cst_last_name(inner.func) == "ddp_output_device"
                ):
                    continue
                helper = "ddp_output_device"
            else:
                continue
            porter.rewrote()
            porter.needs(helper)
            wrapped = cst.Call(func=cst.Name(helper), args=[cst.Arg(inner)])
            args[position] = arg.with_changes(value=wrapped)
        return updated.with_changes(args=args)


def counts_processes(target: ast.expr) -> bool:
    """Whether ``target``'s last name says it holds a process count (``world_size``)."""
    name = last_name(target)
    return name is not None and PROCESS_COUNT_NAME.search(name) is not None


class DeviceCountAsProcessCount(PortingRule):
    """``world_size = torch.cuda.device_count()``: ``local_process_count()`` on every host."""

    code = "ACC045"
    call_rank = 10  # a device count that counts processes, before ACC050's device_count
    name = "device-count-as-process-count"
    message = "`{name}` counts processes here; it is 0 on a host without that accelerator"
    suggestion = "anyaccel.distributed.local_process_count()"
    portable = True
    VALID = (
        "world_size = local_process_count()\n",
        "n = torch.cuda.device_count() if ok else 0\n",
    )
    INVALID = (
        Invalid(
            "import torch\nworld_size = torch.cuda.device_count()\n",
            "import torch\nfrom anyaccel.distributed import local_process_count\n"
            "from anyaccel import get_accelerator\n\n"
            "world_size = local_process_count()\n",
        ),
        Invalid(
            "import torch\nmp.spawn(main, nprocs=torch.cuda.device_count())\n",
            "import torch\nfrom anyaccel.distributed import local_process_count\n"
            "from anyaccel import get_accelerator\n\n"
            "mp.spawn(main, nprocs=local_process_count())\n",
        ),
        Invalid(
            "import torch\nself.world_size = torch.accelerator.device_count()\n",
            "import torch\nfrom anyaccel.distributed import local_process_count\n"
            "from anyaccel import get_accelerator\n\n"
            "self.world_size = local_process_count()\n",
        ),
    )

    def visit_Assign(self, node: ast.Assign, scope: Scope) -> bool:
        if all(counts_processes(target) for target in node.targets):
            self._mark(node.value, scope)
        return False

    def visit_AnnAssign(self, node: ast.AnnAssign, scope: Scope) -> bool:
        if node.value is not None and counts_processes(node.target):
            self._mark(node.value, scope)
        return False

    def visit_Call(self, node: ast.Call, scope: Scope) -> bool:
        for keyword in node.keywords:
            if keyword.arg in PROCESS_COUNT_KEYWORDS:
                self._mark(keyword.value, scope)
        return False

    def _mark(self, value: ast.expr, scope: Scope) -> None:
        if (
            isinstance(value, ast.Call)
            and not value.args
            and not value.keywords
            and scope.qualified_name(value.func) in DEVICE_COUNTS
        ):
            scope.mark(self.code, value.func)

    def visit_Attribute(self, node: ast.Attribute, scope: Scope) -> bool:
        return self._report_marked(node, scope)

    def visit_Name(self, node: ast.Name, scope: Scope) -> bool:
        return self._report_marked(node, scope)

    def _report_marked(self, node: ast.expr, scope: Scope) -> bool:
        if not scope.is_marked(self.code, node):
            return False
        scope.report(node, self.code, f"{scope.qualified_name(node)}()")
        return True

    def plan_Assign(self, node: cst.Assign, porter: Rewriter) -> None:
        from anyaccel.porting.rewriting import last_name as cst_last_name

        names = [cst_last_name(t.target) for t in node.targets]
        if all(n is not None and PROCESS_COUNT_NAME.search(n) for n in names):
            porter.mark(self.code, id(node.value))

    def plan_AnnAssign(self, node: cst.AnnAssign, porter: Rewriter) -> None:
        from anyaccel.porting.rewriting import last_name as cst_last_name

        name = cst_last_name(node.target)
        if node.value is not None and name is not None and PROCESS_COUNT_NAME.search(name):
            porter.mark(self.code, id(node.value))

    def plan_Call(self, node: cst.Call, porter: Rewriter) -> None:
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value in PROCESS_COUNT_KEYWORDS:
                porter.mark(self.code, id(arg.value))

    def rewrite_Call(
        self, original: cst.Call, updated: cst.Call, porter: Rewriter
    ) -> cst.BaseExpression | None:
        import libcst as cst

        if (
            porter.qualified(original.func) not in DEVICE_COUNTS
            or not porter.is_marked(self.code, id(original))
            or original.args
        ):
            return None
        porter.rewrote(original.func)
        porter.needs("local_process_count")
        return cst.Call(func=cst.Name("local_process_count"))
