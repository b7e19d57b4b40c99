"""Tensor and loader methods bound to CUDA: ``.cuda()``, ``.is_cuda``, pinned memory."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from anyaccel.porting.analysis import keyword_value, object_method
from anyaccel.porting.rule import Invalid, PortingRule, Scope

if TYPE_CHECKING:
    import libcst as cst

    from anyaccel.porting.rewriting import Rewriter

__all__ = [
    "DataLoaderPinMemory",
    "TensorCuda",
    "TensorIsCuda",
    "TensorPinMemory",
]

#: Names that visibly hold a device index, so ``.cuda(name)`` ports to ``device_name(name)``.
_INDEX_NAME = re.compile(r"(?:^|_)(?:rank|gpu|gpu_id|gpu_index|device_id|device_index|idx|index)$")
#: Namespaces whose ``is_cuda`` attribute a name rule judges, not ACC031.
_NAMESPACES = ("torch.cuda", "torch.backends.cud", "torch.accelerator")


class TensorCuda(PortingRule):
    """``x.cuda()``: ``x.to(<the accelerator's device>)``."""

    code = "ACC030"
    call_rank = 110
    name = "tensor-cuda"
    message = "`.cuda()` moves to a CUDA device only"
    suggestion = ".to(get_accelerator().current_device_name())"
    portable = True
    VALID = ("y = x.to(get_accelerator().current_device_name())\n", "y = x.cpu()\n")
    INVALID = (
        Invalid(
            "y = x.cuda()\n",
            "from anyaccel import get_accelerator\n\n"
            "y = x.to(get_accelerator().current_device_name())\n",
        ),
        Invalid(
            "y = x.cuda(1, non_blocking=True)\n",
            "from anyaccel import get_accelerator\n\n"
            "y = x.to(get_accelerator().device_name(1), non_blocking=True)\n",
        ),
        Invalid("y = x.cuda(device)\n"),  # a device object or name: which one is not seen
    )

    def visit_Call(self, node: ast.Call, scope: Scope) -> bool:
        if object_method(node, scope.aliases) == "cuda":
            scope.report(node, self.code, ".cuda()")
        return False

    def rewrite_Call(
        self, original: cst.Call, updated: cst.Call, porter: Rewriter
    ) -> cst.BaseExpression | None:
        """``x.cuda(...)`` -> ``x.to(...)`` when the device argument is visibly an index."""
        import libcst as cst

        from anyaccel.porting.rewriting import accelerator, called_method, plain

        if called_method(original, updated, porter) != "cuda":
            return None
        assert isinstance(updated.func, cst.Attribute)  # called_method saw it
        device: cst.Arg | None = None
        rest = []
        for position, arg in enumerate(updated.args):
            is_device = (arg.keyword is None and position == 0) or (
                arg.keyword is not None and arg.keyword.value == "device"
            )
            if is_device:
                device = arg
            elif arg.keyword is None or arg.star:
                return updated
            else:
                rest.append(arg)
        if device is None:
            target = accelerator("current_device_name")
        elif self._is_index(device.value):
            target = accelerator("device_name", plain(device.with_changes(keyword=None)))
        else:
            return updated  # a device object or string: which one is not visible here
        porter.rewrote()
        return updated.with_changes(
            func=cst.Attribute(value=updated.func.value, attr=cst.Name("to")),
            args=[cst.Arg(target), *rest],
        )

    @staticmethod
    def _is_index(value: cst.BaseExpression) -> bool:
        import libcst as cst
        from libcst.helpers import get_full_name_for_node

        if isinstance(value, cst.Integer):
            return True
        if isinstance(value, cst.Call):
            called = get_full_name_for_node(value.func) or ""
            return called.endswith("current_device") and not value.args
        name = get_full_name_for_node(value)
        return name is not None and _INDEX_NAME.search(name.split(".")[-1]) is not None


class TensorIsCuda(PortingRule):
    """``x.is_cuda``: ``get_accelerator().on_accelerator(x)``."""

    code = "ACC031"
    name = "tensor-is-cuda"
    message = "`.is_cuda` is false on every other accelerator"
    suggestion = "get_accelerator().on_accelerator(tensor)"
    portable = True
    VALID = ("b = get_accelerator().on_accelerator(x)\n", "x.is_cuda = True\n")
    INVALID = (
        Invalid(
            "b = x.is_cuda\n",
            "from anyaccel import get_accelerator\n\nb = get_accelerator().on_accelerator(x)\n",
        ),
    )

    def visit_Attribute(self, node: ast.Attribute, scope: Scope) -> bool:
        if node.attr == "is_cuda" and isinstance(node.ctx, ast.Load):
            qualified = scope.qualified_name(node)
            if qualified is None or not qualified.startswith(_NAMESPACES):
                scope.report(node, self.code, ".is_cuda")
        return False

    def plan_Call(self, node: cst.Call, porter: Rewriter) -> None:
        import libcst as cst

        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "is_cuda":
            porter.claim(node.func)  # x.is_cuda() is some object's method, not the property

    def plan_AssignTarget(self, node: cst.AssignTarget, porter: Rewriter) -> None:
        self._written(node.target, porter)

    def plan_AugAssign(self, node: cst.AugAssign, porter: Rewriter) -> None:
        self._written(node.target, porter)

    def plan_AnnAssign(self, node: cst.AnnAssign, porter: Rewriter) -> None:
        self._written(node.target, porter)

    @staticmethod
    def _written(target: cst.BaseExpression, porter: Rewriter) -> None:
        """``x.is_cuda = ...`` sets an attribute: not the read this rule ports."""
        import libcst as cst

        if isinstance(target, cst.Attribute) and target.attr.value == "is_cuda":
            porter.claim(target)

    def rewrite_Attribute(
        self, original: cst.Attribute, updated: cst.Attribute, porter: Rewriter
    ) -> cst.BaseExpression | None:
        import libcst as cst

        from anyaccel.porting.rewriting import accelerator

        if original.attr.value != "is_cuda":
            return None
        qualified = porter.qualified(original)
        if qualified is not None and qualified.startswith(_NAMESPACES):
            return None
        porter.rewrote()
        return accelerator("on_accelerator", cst.Arg(updated.value))


class TensorPinMemory(PortingRule):
    """``x.pin_memory()``: ``get_accelerator().pin_memory(x)``."""

    code = "ACC032"
    call_rank = 120
    name = "tensor-pin-memory"
    message = "`.pin_memory()` fails where the build has no pinned-memory support"
    suggestion = "get_accelerator().pin_memory(tensor)"
    portable = True
    VALID = ("y = get_accelerator().pin_memory(x)\n", "y = x.pin_memory(device)\n")
    INVALID = (
        Invalid(
            "y = x.pin_memory()\n",
            "from anyaccel import get_accelerator\n\ny = get_accelerator().pin_memory(x)\n",
        ),
    )

    def visit_Call(self, node: ast.Call, scope: Scope) -> bool:
        if (
            object_method(node, scope.aliases) == "pin_memory"
            and not node.args
            and not node.keywords
        ):
            scope.report(node, self.code, ".pin_memory()")
        return False

    def rewrite_Call(
        self, original: cst.Call, updated: cst.Call, porter: Rewriter
    ) -> cst.BaseExpression | None:
        import libcst as cst

        from anyaccel.porting.rewriting import accelerator, called_method

        if called_method(original, updated, porter) != "pin_memory" or original.args:
            return None
        assert isinstance(updated.func, cst.Attribute)
        porter.rewrote()
        return accelerator("pin_memory", cst.Arg(updated.func.value))


class DataLoaderPinMemory(PortingRule):
    """``DataLoader(pin_memory=True)``: pin where the accelerator says pinning applies."""

    code = "ACC033"
    call_rank = 100
    name = "dataloader-pin-memory"
    message = (
        "`DataLoader(pin_memory=True)` pins for CUDA; on a host without it torch warns and "
        "pins nothing, and on unified memory pinning buys nothing"
    )
    suggestion = "pin_memory=get_accelerator().pin_memory_applies()"
    portable = True
    VALID = (
        "d = DataLoader(ds, pin_memory=get_accelerator().pin_memory_applies())\n",
        "d = DataLoader(ds, pin_memory=False)\n",
    )
    INVALID = (
        Invalid(
            "import torch\nd = torch.utils.data.DataLoader(ds, batch_size=8, pin_memory=True)\n",
            "import torch\nfrom anyaccel import get_accelerator\n\n"
            "d = torch.utils.data.DataLoader(ds, batch_size=8, "
            "pin_memory=get_accelerator().pin_memory_applies())\n",
        ),
    )

    def visit_Call(self, node: ast.Call, scope: Scope) -> bool:
        qualified = scope.qualified_name(node.func)
        if qualified is not None and qualified.rsplit(".", 1)[-1] == "DataLoader":
            pinned = keyword_value(node, "pin_memory")
            if isinstance(pinned, ast.Constant) and pinned.value is True:
                scope.report(pinned, self.code, "pin_memory=True")
        return False

    def rewrite_Call(
        self, original: cst.Call, updated: cst.Call, porter: Rewriter
    ) -> cst.BaseExpression | None:
        """``pin_memory=True`` -> ``pin_memory=get_accelerator().pin_memory_applies()``."""
        import libcst as cst

        from anyaccel.porting.rewriting import accelerator

        qualified = porter.qualified(original.func)
        if qualified is None or qualified.rsplit(".", 1)[-1] != "DataLoader":
            return None
        for position, arg in enumerate(updated.args):
            value = arg.value
            if (
                arg.keyword is not None
                and arg.keyword.value == "pin_memory"
                and isinstance(value, cst.Name)
                and value.value == "True"
            ):
                porter.rewrote()
                args = list(updated.args)
                args[position] = arg.with_changes(value=accelerator("pin_memory_applies"))
                return updated.with_changes(args=args)
        return None
