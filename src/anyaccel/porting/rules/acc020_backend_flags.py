"""``torch.backends.cudnn`` and ``torch.backends.cuda`` flags (ACC020): CUDA's tuning only."""

from __future__ import annotations

from anyaccel.porting.rule import Invalid, PortingRule

__all__ = ["BackendFlag"]

_FLAG_MODULES = ("torch.backends.cudnn", "torch.backends.cuda")


class BackendFlag(PortingRule):
    """A cuDNN/CUDA backend flag: harmless elsewhere, so ``port`` guards it for CUDA."""

    code = "ACC020"
    name = "cuda-backend-flag"
    message = "`{name}` tunes the CUDA/cuDNN backend only and does nothing elsewhere"
    suggestion = "set it only when get_accelerator().device_name() == 'cuda'"
    portable = False
    guarded = True
    VALID = (
        "if get_accelerator().device_name() == 'cuda':\n"
        "    torch.backends.cudnn.benchmark = True\n",
        "torch.backends.mps.is_available()\n",
    )
    INVALID = (
        Invalid(
            "import torch\ntorch.backends.cudnn.benchmark = True\n",
            "import torch\nfrom anyaccel import get_accelerator\n\n"
            'if get_accelerator().device_name() == "cuda":\n'
            "    torch.backends.cudnn.benchmark = True\n",
        ),
        Invalid(
            "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n"
            "torch.backends.cudnn.allow_tf32 = True\n",
            "import torch\nfrom anyaccel import get_accelerator\n\n"
            'if get_accelerator().device_name() == "cuda":\n'
            "    torch.backends.cuda.matmul.allow_tf32 = True\n"
            "    torch.backends.cudnn.allow_tf32 = True\n",
        ),
    )

    def match_name(self, qualified: str) -> str | None:
        for flags in _FLAG_MODULES:
            if qualified == flags or qualified.startswith(flags + "."):
                return ""
        return None
