"""``torch.cuda.amp``: autocast (ACC010), the gradient scaler (ACC011) and the rest (ACC012)."""

from __future__ import annotations

import ast

from anyaccel.porting.analysis import keyword_value
from anyaccel.porting.rule import Invalid, PortingRule, Scope

__all__ = ["DEVICE_SCALERS", "AmpOther", "Autocast", "GradScaler"]

#: Scalers that take a device type first (``"cuda"`` when not given).
DEVICE_SCALERS = frozenset({"torch.amp.GradScaler", "torch.GradScaler"})


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
    name = "cuda-amp-autocast"
    message = "`{name}` is autocast for CUDA only"
    suggestion = (
        "torch.autocast(device_type=get_accelerator().device_name(), "
        "dtype=autocast_dtype(torch.float16), ...)"
    )
    portable = True
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


class GradScaler(PortingRule):
    """A CUDA gradient scaler: ``torch.cuda.amp.GradScaler``, or ``torch.amp``'s for ``"cuda"``.

    ``torch.amp.GradScaler`` scales for CUDA when told ``"cuda"`` or told no device at all.
    """

    code = "ACC011"
    name = "cuda-amp-grad-scaler"
    message = "`{name}` is the CUDA-only gradient scaler"
    suggestion = (
        "torch.amp.GradScaler(get_accelerator().device_name(), enabled=grad_scaler_applies(), ...)"
    )
    portable = True
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


class AmpOther(PortingRule):
    """Any other ``torch.cuda.amp`` name (``custom_fwd``...): its ``torch.amp`` counterpart."""

    code = "ACC012"
    name = "cuda-amp-other"
    message = "`{name}` is CUDA-only"
    suggestion = "its torch.amp counterpart with device_type=get_accelerator().device_name()"
    portable = False
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
