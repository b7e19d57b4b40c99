"""``torch.cuda.amp``: autocast (ACC010), the gradient scaler (ACC011) and the rest (ACC012)."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import TYPE_CHECKING

from anyaccel.porting.analysis import keyword_value
from anyaccel.porting.rule import Invalid, PortingRule, Scope

if TYPE_CHECKING:
    import libcst as cst

    from anyaccel.porting.rewriting import Rewriter

__all__ = ["DEVICE_SCALERS", "AmpOther", "Autocast", "GradScaler"]

#: Scalers that take a device type first (``"cuda"`` when not given).
DEVICE_SCALERS = frozenset({"torch.amp.GradScaler", "torch.GradScaler"})
#: Autocasts that take a device type first: given CUDA's, they meant CUDA's float16 default.
_DEVICE_AUTOCASTS = frozenset({"torch.autocast", "torch.amp.autocast"})
#: Positional parameters of ``torch.cuda.amp.autocast``, which ``torch.autocast`` takes by keyword.
_AUTOCAST_PARAMETERS = ("enabled", "dtype", "cache_enabled")
#: Positional parameters of ``torch.cuda.amp.GradScaler`` (``torch.amp.GradScaler`` takes the
#: device first, then the same ones).
_SCALER_PARAMETERS = ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")


def _amp_member(qualified: str) -> str | None:
    """``autocast`` of ``torch.cuda.amp.autocast``; ``""`` for the module; ``None`` elsewhere."""
    if qualified == "torch.cuda.amp":
        return ""
    if qualified.startswith("torch.cuda.amp."):
        return qualified[len("torch.cuda.amp.") :].split(".")[0]
    return None


class Autocast(PortingRule):
    """``torch.cuda.amp.autocast``: ``torch.autocast`` on the accelerator, in an honest dtype."""

    code = "ACC010"
    call_rank = 80
    name = "cuda-amp-autocast"
    message = "`{name}` is autocast for CUDA only"
    suggestion = (
        "torch.autocast(device_type=get_accelerator().device_name(), "
        "dtype=autocast_dtype(torch.float16), ...)"
    )
    portable = True
    #: What ``port`` says where it chose autocast's dtype (``{dtype}``: the one it wrote).
    precision_note = (
        "autocast runs in autocast_dtype({dtype}) (CUDA's autocast was float16 unless told): "
        "that dtype where the accelerator computes it (is_fp16_supported()/is_bf16_supported()), "
        "else the other half type"
    )
    VALID = ("with torch.autocast(device_type=get_accelerator().device_name()):\n    pass\n",)
    INVALID = (
        Invalid(
            "import torch\nwith torch.cuda.amp.autocast():\n    pass\n",
            "import torch\nfrom anyaccel import autocast_dtype, get_accelerator\n\n"
            "with torch.autocast(device_type=get_accelerator().device_name(), "
            "dtype=autocast_dtype(torch.float16)):\n    pass\n",
        ),
        Invalid(
            "from torch.cuda.amp import autocast\nwith autocast(dtype=torch.bfloat16):\n    pass\n",
            "\nimport torch\nfrom anyaccel import autocast_dtype, get_accelerator\n\n"
            "with torch.autocast(device_type=get_accelerator().device_name(), "
            "dtype=autocast_dtype(torch.bfloat16)):\n    pass\n",
        ),
    )

    def match_name(self, qualified: str) -> str | None:
        return "" if _amp_member(qualified) == "autocast" else None

    def rewrite_Call(
        self, original: cst.Call, updated: cst.Call, porter: Rewriter
    ) -> cst.BaseExpression | None:
        """``torch.cuda.amp.autocast(...)`` and ``torch.autocast("cuda")``: an honest dtype."""
        import libcst as cst

        from anyaccel.porting.rewriting import (
            accelerator,
            by_keyword,
            keyword,
            names_cuda,
            split_device,
        )

        qualified = porter.qualified(original.func)
        if qualified == "torch.cuda.amp.autocast":
            args = by_keyword(updated.args, _AUTOCAST_PARAMETERS)
            if args is None:
                return updated  # *args or too many: leave to the user
            args = self._honest_dtype(args, porter)
            porter.rewrote(original.func)
            porter.needs("torch")
            device_type = keyword("device_type", accelerator("device_name"))
            return updated.with_changes(
                func=cst.parse_expression("torch.autocast"), args=[device_type, *args]
            )
        if qualified not in _DEVICE_AUTOCASTS or not names_cuda(original, "device_type"):
            return None
        split = split_device(updated.args, "device_type")
        if split is None:
            return updated
        device, rest = split
        keyed = by_keyword(rest, ("dtype", "enabled", "cache_enabled"))
        if keyed is None:
            return updated
        porter.rewrote()
        return updated.with_changes(args=[device, *self._honest_dtype(keyed, porter)])

    @staticmethod
    def _honest_dtype(args: list[cst.Arg], porter: Rewriter) -> list[cst.Arg]:
        """``args`` with ``dtype=`` through ``autocast_dtype``: float16 when none was given."""
        import libcst as cst

        from anyaccel.porting.rewriting import keyword, plain

        if any(
            a.keyword is not None
            and a.keyword.value == "enabled"
            and isinstance(a.value, cst.Name)
            and a.value.value == "False"
            for a in args
        ):
            return args  # autocast turned off: no dtype is at stake
        porter.needs("autocast_dtype")
        porter.needs("torch")
        for position, arg in enumerate(args):
            if arg.keyword is not None and arg.keyword.value == "dtype":
                dtype = cst.Call(func=cst.Name("autocast_dtype"), args=[cst.Arg(arg.value)])
                return [*args[:position], arg.with_changes(value=dtype), *args[position + 1 :]]
        half = cst.Call(
            func=cst.Name("autocast_dtype"), args=[cst.Arg(cst.parse_expression("torch.float16"))]
        )
        return [*(plain(a) for a in args), keyword("dtype", half)]


class GradScaler(PortingRule):
    """A CUDA gradient scaler: ``torch.cuda.amp.GradScaler``, or ``torch.amp``'s for ``"cuda"``.

    ``torch.amp.GradScaler`` scales for CUDA when told ``"cuda"`` or told no device at all.
    """

    code = "ACC011"
    call_rank = 90
    name = "cuda-amp-grad-scaler"
    message = "`{name}` is the CUDA-only gradient scaler"
    suggestion = (
        "torch.amp.GradScaler(get_accelerator().device_name(), enabled=grad_scaler_applies(), ...)"
    )
    portable = True
    #: What ``port`` says where it wrote ``grad_scaler_applies()``.
    precision_note = (
        "the GradScaler is enabled only where float16 autocast runs (grad_scaler_applies()); "
        "bfloat16 needs no loss scaling"
    )
    VALID = (
        "import torch\ns = torch.amp.GradScaler(get_accelerator().device_name())\n",
        "import torch\ns = torch.amp.GradScaler('cpu')\n",
        "import torch\ns = torch.amp.GradScaler(device)\n",  # a variable: which one is not seen
    )
    _PORTED = (
        "import torch\nfrom anyaccel import get_accelerator, grad_scaler_applies\n\n"
        "s = torch.amp.GradScaler(get_accelerator().device_name(), enabled=grad_scaler_applies())\n"
    )
    INVALID = (
        Invalid("import torch\ns = torch.cuda.amp.GradScaler()\n", _PORTED),
        Invalid(
            "import torch\ns = torch.cuda.amp.GradScaler(enabled=use_amp)\n",
            "import torch\nfrom anyaccel import get_accelerator, grad_scaler_applies\n\n"
            "s = torch.amp.GradScaler(get_accelerator().device_name(), "
            "enabled=grad_scaler_applies() and use_amp)\n",
        ),
        Invalid("import torch\ns = torch.amp.GradScaler('cuda')\n", _PORTED),
        Invalid("import torch\ns = torch.amp.GradScaler()\n", _PORTED),
        Invalid(
            "import torch\ns = torch.amp.GradScaler(enabled=use_amp)\n",
            "import torch\nfrom anyaccel import get_accelerator, grad_scaler_applies\n\n"
            "s = torch.amp.GradScaler(get_accelerator().device_name(), "
            "enabled=grad_scaler_applies() and use_amp)\n",
        ),
        Invalid("import torch\ns = torch.GradScaler('cuda')\n", _PORTED.replace(".amp.", ".", 1)),
        Invalid(
            'import torch\ns = torch.amp.GradScaler(device="cuda", init_scale=1024)\n',
            "import torch\nfrom anyaccel import get_accelerator, grad_scaler_applies\n\n"
            "s = torch.amp.GradScaler(device=get_accelerator().device_name(), "
            "init_scale=1024, enabled=grad_scaler_applies())\n",
        ),
        Invalid("from torch.cuda.amp import GradScaler as Scaler\ns = Scaler()\n", "\n" + _PORTED),
        Invalid(
            "from torch.amp import GradScaler as Scaler\ns = Scaler(device='cuda')\n",
            "from torch.amp import GradScaler as Scaler\n"
            "from anyaccel import get_accelerator, grad_scaler_applies\n\n"
            "s = Scaler(device=get_accelerator().device_name(), enabled=grad_scaler_applies())\n",
        ),
        Invalid(
            "import torch.amp as amp\ns = amp.GradScaler('cuda')\n",
            "import torch.amp as amp\nfrom anyaccel import get_accelerator, grad_scaler_applies\n\n"
            "s = amp.GradScaler(get_accelerator().device_name(), enabled=grad_scaler_applies())\n",
        ),
    )

    def match_name(self, qualified: str) -> str | None:
        return "" if _amp_member(qualified) == "GradScaler" else None

    def visit_Call(self, node: ast.Call, scope: Scope) -> bool:
        """``torch.amp.GradScaler("cuda")`` / ``(device="cuda")`` / ``()``: CUDA's scaler too."""
        qualified = scope.qualified_name(node.func)
        if qualified not in DEVICE_SCALERS:
            return False
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords
        ):
            return False  # *args, **kwargs: the device is not visible here
        device = node.args[0] if node.args else keyword_value(node, "device")
        if device is None:
            scope.report(node, self.code, f"{qualified}()")
        elif isinstance(device, ast.Constant) and device.value == "cuda":
            scope.report(device, self.code, f"{qualified}({device.value!r})")
            scope.claim(device)  # the scaler's device, not a device string of its own
        return False

    def rewrite_Call(
        self, original: cst.Call, updated: cst.Call, porter: Rewriter
    ) -> cst.BaseExpression | None:
        """A CUDA scaler: the accelerator's device, enabled only where float16 autocast runs."""
        import libcst as cst

        from anyaccel.porting.rewriting import (
            accelerator,
            names_cuda,
            names_no_device,
            plain,
            split_device,
        )

        qualified = porter.qualified(original.func)
        if qualified == "torch.cuda.amp.GradScaler":
            scaler = self._scaler(updated.args, porter)
            if scaler is None:
                return updated  # *args or too many: leave to the user
            porter.rewrote(original.func)
            porter.needs("torch")
            return updated.with_changes(
                func=cst.parse_expression("torch.amp.GradScaler"),
                args=[cst.Arg(accelerator("device_name")), *scaler],
            )
        if qualified not in DEVICE_SCALERS:
            return None
        if names_cuda(original, "device"):
            split = split_device(updated.args, "device")
            scaler = None if split is None else self._scaler(split[1], porter)
            if split is not None and scaler is not None:
                porter.rewrote()
                return updated.with_changes(args=[plain(split[0]), *scaler])
        elif names_no_device(original, "device"):  # torch's default device is "cuda"
            scaler = self._scaler(updated.args, porter)
            if scaler is not None:
                porter.rewrote()
                device = cst.Arg(accelerator("device_name"))
                return updated.with_changes(args=[device, *scaler])
        return None

    @staticmethod
    def _scaler(args: Sequence[cst.Arg], porter: Rewriter) -> list[cst.Arg] | None:
        """A CUDA scaler's arguments (after its device) with ``enabled`` only where fp16 runs."""
        import libcst as cst

        from anyaccel.porting.rewriting import by_keyword, keyword, plain

        keyed = by_keyword(args, _SCALER_PARAMETERS)
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
                rest.append(plain(arg))
        porter.needs("grad_scaler_applies")
        return [*rest, keyword("enabled", applies)]


class AmpOther(PortingRule):
    """Any other ``torch.cuda.amp`` name (``custom_fwd``...): its ``torch.amp`` counterpart."""

    code = "ACC012"
    name = "cuda-amp-other"
    message = "`{name}` is CUDA-only"
    suggestion = "its torch.amp counterpart with device_type=get_accelerator().device_name()"
    portable = False
    guarded = True
    VALID = ("f = torch.amp.custom_fwd(device_type=get_accelerator().device_name())\n",)
    INVALID = (
        Invalid("import torch\nf = torch.cuda.amp.custom_fwd\n"),
        Invalid(
            "from torch.cuda.amp import custom_bwd\n\n"
            "@custom_bwd\ndef backward(ctx, g):\n    return g\n"
        ),
    )

    def match_name(self, qualified: str) -> str | None:
        member = _amp_member(qualified)
        return "" if member is not None and member not in ("autocast", "GradScaler") else None
