"""Tensor and loader methods bound to CUDA: ``.cuda()``, ``.is_cuda``, pinned memory."""

from __future__ import annotations

import ast

from anyaccel.porting.analysis import keyword_value, object_method
from anyaccel.porting.rule import Invalid, PortingRule, Scope

__all__ = ["DataLoaderPinMemory", "TensorCuda", "TensorIsCuda", "TensorPinMemory"]

#: Namespaces whose ``is_cuda`` attribute a name rule judges, not ACC031.
_NAMESPACES = ("torch.cuda", "torch.backends.cud", "torch.accelerator")


class TensorCuda(PortingRule):
    """``x.cuda()``: ``x.to(<the accelerator's device>)``."""

    code = "ACC030"
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


class TensorPinMemory(PortingRule):
    """``x.pin_memory()``: ``get_accelerator().pin_memory(x)``."""

    code = "ACC032"
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


class DataLoaderPinMemory(PortingRule):
    """``DataLoader(pin_memory=True)``: pin where the accelerator says pinning applies."""

    code = "ACC033"
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
