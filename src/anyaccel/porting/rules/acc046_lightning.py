"""Lightning's ``accelerator="gpu"``/``"cuda"`` (ACC046): the anyaccel accelerator instead."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from anyaccel.porting.analysis import is_lightning_entry, keyword_value
from anyaccel.porting.rule import Invalid, PortingRule, Scope

if TYPE_CHECKING:
    import libcst as cst

    from anyaccel.porting.rewriting import Rewriter

__all__ = ["LightningCudaAccelerator"]


class LightningCudaAccelerator(PortingRule):
    """``Trainer(accelerator="gpu")`` or ``Fabric(accelerator="cuda")``: CUDA GPUs only."""

    code = "ACC046"
    name = "lightning-cuda-accelerator"
    message = "Lightning's {name} runs on CUDA GPUs only; `devices=N` then counts GPUs"
    suggestion = (
        'accelerator="anyaccel" after `import anyaccel.integrations.lightning`; devices=N '
        "then counts the accelerator's devices (CPU processes on the CPU)"
    )
    portable = False
    VALID = (
        "import lightning as L\nt = L.Trainer(accelerator='anyaccel', devices=2)\n",
        "t = Trainer(accelerator='gpu')\n",  # not visibly Lightning's
    )
    INVALID = (
        Invalid("import lightning as L\nt = L.Trainer(accelerator='gpu', devices=2)\n"),
        Invalid("from lightning.fabric import Fabric\nf = Fabric(accelerator='cuda')\n"),
        Invalid("from pytorch_lightning import Trainer\nt = Trainer(accelerator='cuda')\n"),
    )

    def visit_Call(self, node: ast.Call, scope: Scope) -> bool:
        if not is_lightning_entry(scope.qualified_name(node.func)):
            return False
        chosen = keyword_value(node, "accelerator")
        if isinstance(chosen, ast.Constant) and chosen.value in ("gpu", "cuda"):
            scope.report(chosen, self.code, f"accelerator={chosen.value!r}")
            scope.claim(chosen)  # Lightning's name, not a device string
        return False

    def plan_Call(self, node: cst.Call, porter: Rewriter) -> None:
        """Lightning's ``accelerator="cuda"`` is its name, not a device string to port."""
        if is_lightning_entry(porter.qualified(node.func)):
            for arg in node.args:
                if arg.keyword is not None and arg.keyword.value == "accelerator":
                    porter.claim(arg.value)
