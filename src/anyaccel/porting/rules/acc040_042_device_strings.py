"""Strings that name CUDA: device strings (ACC040), ``'nccl'`` (ACC041), its visible devices."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from anyaccel.porting.analysis import is_cuda_fstring, runtime_device_index
from anyaccel.porting.rule import Invalid, PortingRule, Scope

if TYPE_CHECKING:
    import libcst as cst

    from anyaccel.porting.rewriting import Rewriter

__all__ = ["DEVICE_STRING", "CudaVisibleDevices", "DeviceString", "NcclBackend"]

#: ``"cuda"`` or ``"cuda:N"``.
DEVICE_STRING = re.compile(r"cuda(?::(\d+))?")


class DeviceString(PortingRule):
    """``"cuda"``, ``"cuda:1"``, ``f"cuda:{i}"``, ``"cuda:%d" % i``: the accelerator's name."""

    code = "ACC040"
    call_rank = 60
    name = "cuda-device-string"
    message = "the device string {name} names CUDA"
    suggestion = "get_accelerator().device_name() or get_accelerator().device_name(i)"
    portable = True
    VALID = (
        "d = torch.device(get_accelerator().device_name())\n",
        "stats = {'cuda': 1}\n",  # a label
        "n = state['cuda:0']\n",
        "'cuda'\n",  # prose
        "backend = 'cuda' 'x'\n",
    )
    INVALID = (
        Invalid(
            "import torch\nd = torch.device('cuda')\n",
            "import torch\nfrom anyaccel import get_accelerator\n\n"
            "d = torch.device(get_accelerator().device_name())\n",
        ),
        Invalid(
            "y = x.to('cuda:3')\n",
            "from anyaccel import get_accelerator\n\ny = x.to(get_accelerator().device_name(3))\n",
        ),
        Invalid(
            "d = f'cuda:{rank}'\n",
            "from anyaccel import get_accelerator\n\nd = get_accelerator().device_name(rank)\n",
        ),
        Invalid(
            "d = 'cuda:{}'.format(args.gpu)\n",
            "from anyaccel import get_accelerator\n\nd = get_accelerator().device_name(args.gpu)\n",
        ),
        Invalid(
            "d = 'cuda:%d' % i\n",
            "from anyaccel import get_accelerator\n\nd = get_accelerator().device_name(i)\n",
        ),
        Invalid(
            "d = 'cuda:' + str(i)\n",
            "from anyaccel import get_accelerator\n\nd = get_accelerator().device_name(i)\n",
        ),
    )

    def visit_Constant(self, node: ast.Constant, scope: Scope) -> bool:
        if isinstance(node.value, str) and DEVICE_STRING.fullmatch(node.value):
            scope.report(node, self.code, repr(node.value))
            return True
        return False

    def visit_JoinedStr(self, node: ast.JoinedStr, scope: Scope) -> bool:
        if is_cuda_fstring(node):
            scope.report(node, self.code, "f'cuda:{...}'")
            return True
        return False

    def visit_BinOp(self, node: ast.BinOp, scope: Scope) -> bool:
        if runtime_device_index(node) is not None:
            scope.report(node, self.code, repr(ast.unparse(node)))
            return True
        return False

    def visit_Call(self, node: ast.Call, scope: Scope) -> bool:
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "format"
            and runtime_device_index(node) is not None
        ):
            scope.report(node, self.code, "'cuda:{}'.format(...)")
        return False

    def rewrite_SimpleString(
        self, original: cst.SimpleString, updated: cst.SimpleString, porter: Rewriter
    ) -> cst.BaseExpression | None:
        import libcst as cst

        from anyaccel.porting.rewriting import accelerator

        value = original.evaluated_value
        match = DEVICE_STRING.fullmatch(value) if isinstance(value, str) else None
        if match is None:
            return None
        porter.rewrote()
        if match.group(1) is None:
            return accelerator("device_name")
        return accelerator("device_name", cst.Arg(cst.Integer(match.group(1))))

    def rewrite_FormattedString(
        self, original: cst.FormattedString, updated: cst.FormattedString, porter: Rewriter
    ) -> cst.BaseExpression | None:
        import libcst as cst

        from anyaccel.porting.rewriting import accelerator

        parts = updated.parts
        if (
            len(parts) != 2
            or not isinstance(parts[0], cst.FormattedStringText)
            or parts[0].value != "cuda:"
            or not isinstance(parts[1], cst.FormattedStringExpression)
            or parts[1].format_spec is not None
            or parts[1].conversion is not None
        ):
            return None
        porter.rewrote()
        return accelerator("device_name", cst.Arg(parts[1].expression))

    def rewrite_Call(
        self, original: cst.Call, updated: cst.Call, porter: Rewriter
    ) -> cst.BaseExpression | None:
        import libcst as cst

        if isinstance(original.func, cst.Attribute) and original.func.attr.value == "format":
            return self._runtime_string(original, updated, porter)
        return None

    def rewrite_BinaryOperation(
        self, original: cst.BinaryOperation, updated: cst.BinaryOperation, porter: Rewriter
    ) -> cst.BaseExpression | None:
        return self._runtime_string(original, updated, porter)

    @staticmethod
    def _runtime_string(
        original: cst.BaseExpression, updated: cst.BaseExpression, porter: Rewriter
    ) -> cst.BaseExpression | None:
        """``"cuda:{}".format(i)``, ``"cuda:%d" % i``, ``"cuda:" + str(i)``: ``device_name(i)``."""
        import libcst as cst

        from anyaccel.porting.rewriting import accelerator, as_ast

        tree = as_ast(original)
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
        porter.rewrote()
        return accelerator("device_name", cst.Arg(index))


class NcclBackend(PortingRule):
    """``'nccl'``: the accelerator's communication backend."""

    code = "ACC041"
    name = "nccl-backend"
    message = "the communication backend 'nccl' exists for CUDA only"
    suggestion = "get_accelerator().communication_backend_name()"
    portable = True
    VALID = ("dist.init_process_group(backend=get_accelerator().communication_backend_name())\n",)
    INVALID = (
        Invalid(
            "dist.init_process_group(backend='nccl')\n",
            "from anyaccel import get_accelerator\n\n"
            "dist.init_process_group(backend=get_accelerator().communication_backend_name())\n",
        ),
    )

    def visit_Constant(self, node: ast.Constant, scope: Scope) -> bool:
        if node.value == "nccl":
            scope.report(node, self.code, "'nccl'")
            return True
        return False

    def rewrite_SimpleString(
        self, original: cst.SimpleString, updated: cst.SimpleString, porter: Rewriter
    ) -> cst.BaseExpression | None:
        from anyaccel.porting.rewriting import accelerator

        if original.evaluated_value != "nccl":
            return None
        porter.rewrote()
        return accelerator("communication_backend_name")


class CudaVisibleDevices(PortingRule):
    """``'CUDA_VISIBLE_DEVICES'``: the accelerator names its own variables."""

    code = "ACC042"
    name = "cuda-visible-devices"
    message = "'CUDA_VISIBLE_DEVICES' selects CUDA devices only"
    suggestion = "get_accelerator().visible_devices_envs() / set_visible_devices_envs(env, ids)"
    portable = False
    VALID = ("envs = get_accelerator().visible_devices_envs()\n",)
    INVALID = (
        Invalid("os.environ['CUDA_VISIBLE_DEVICES'] = '0'\n"),
        Invalid("v = os.environ.get('CUDA_VISIBLE_DEVICES')\n"),
    )

    def visit_Constant(self, node: ast.Constant, scope: Scope) -> bool:
        if node.value == "CUDA_VISIBLE_DEVICES":
            scope.report(node, self.code, "'CUDA_VISIBLE_DEVICES'")
            return True
        return False

    def visit_label(self, node: ast.Constant, scope: Scope) -> bool:
        """A dict key or subscript is a label, but an environment key is what matters here."""
        return self.visit_Constant(node, scope)
