"""``torch.cuda.*`` names: the contract's (ACC001), CUDA's own (ACC002), and two that differ.

The set of ``torch.cuda`` names that port one-to-one comes from the ``Accelerator`` class in
``anyaccel/abstract.py``, read with ``ast`` so that checking never has to import torch.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from anyaccel.porting.rule import Invalid, PortingRule

if TYPE_CHECKING:
    import libcst as cst

    from anyaccel.porting.rewriting import Rewriter

__all__ = [
    "CUDA_ALIASES",
    "ContractApi",
    "CudaOnlyApi",
    "CurrentDevice",
    "DefaultGenerators",
    "contract_names",
    "portable_cuda_names",
]

#: ``torch.cuda`` names whose anyaccel spelling differs: dotted name under torch.cuda -> method.
CUDA_ALIASES: dict[str, str] = {
    "nvtx.range_push": "range_push",
    "nvtx.range_pop": "range_pop",
}

#: Contract names that ``torch.cuda`` uses for something else: ``torch.cuda.device`` is a
#: context manager, ``torch.cuda.amp`` and ``torch.cuda.random`` are modules.
_DIFFERENT_MEANING = frozenset({"device", "amp", "random"})
#: ``torch.cuda`` members other rules own.
_OWN_RULES = frozenset({"amp", "current_device", "default_generators"})


@functools.cache
def contract_names() -> frozenset[str]:
    """Public method and property names of ``Accelerator``, read from ``abstract.py``'s source."""
    spec = importlib.util.find_spec("anyaccel.abstract")
    if spec is None or spec.origin is None:  # pragma: no cover - anyaccel is installed broken
        raise RuntimeError("cannot locate anyaccel/abstract.py; reinstall anyaccel")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Accelerator":
            return frozenset(
                item.name
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                and not item.name.startswith("_")
            )
    raise RuntimeError(f"no class Accelerator in {spec.origin}")  # pragma: no cover


@functools.cache
def portable_cuda_names() -> frozenset[str]:
    """``torch.cuda`` attributes that port to the same-named contract member."""
    return contract_names() - _DIFFERENT_MEANING


def _cuda_member(qualified: str) -> str | None:
    """``synchronize.x`` of ``torch.cuda.synchronize.x``; ``None`` outside ``torch.cuda``."""
    return qualified[len("torch.cuda.") :] if qualified.startswith("torch.cuda.") else None


class ContractApi(PortingRule):
    """A ``torch.cuda`` function or class the accelerator contract has under the same name."""

    code = "ACC001"
    name = "cuda-contract-api"
    message = "`{name}` is CUDA-only; the accelerator contract has it"
    suggestion = "get_accelerator().{attr}"
    portable = True
    VALID = (
        "get_accelerator().synchronize()\n",
        "torch.cuda.synchronize()  # anyaccel: ignore[ACC001]\n",
        "x = torch.cuda.device(0)\n",  # a context manager: not the contract's device()
    )
    INVALID = (
        Invalid(
            "import torch\ntorch.cuda.synchronize()\n",
            "import torch\nfrom anyaccel import get_accelerator\n\n"
            "get_accelerator().synchronize()\n",
        ),
        Invalid(
            "import torch.cuda as tc\nok = tc.is_available()\n",
            # the import the port replaced goes; its line stays blank
            "\nfrom anyaccel import get_accelerator\n\nok = get_accelerator().is_available()\n",
        ),
        Invalid(
            "from torch.cuda import Stream\ns = Stream()\n",
            "\nfrom anyaccel import get_accelerator\n\ns = get_accelerator().Stream()\n",
        ),
        Invalid(
            "import torch\ntorch.cuda.nvtx.range_push('step')\n",
            "import torch\nfrom anyaccel import get_accelerator\n\n"
            "get_accelerator().range_push('step')\n",
        ),
    )

    def match_name(self, qualified: str) -> str | None:
        rest = _cuda_member(qualified)
        if rest is None:
            return None
        for alias, attr in CUDA_ALIASES.items():
            if rest == alias or rest.startswith(alias + "."):
                return attr
        member = rest.split(".")[0]
        if member in _OWN_RULES or member not in portable_cuda_names():
            return None
        return member

    def plan_Call(self, node: cst.Call, porter: Rewriter) -> None:
        qualified = porter.qualified(node.func)
        if (
            qualified is not None
            and self.match_name(qualified) is not None
            and any(a.keyword is not None and a.keyword.value == "device" for a in node.args)
        ):
            porter.claim(node.func)  # device= may be a torch.device: leave it to the user

    def rewrite_Attribute(
        self, original: cst.Attribute, updated: cst.Attribute, porter: Rewriter
    ) -> cst.BaseExpression | None:
        return self._member(original, porter)

    def rewrite_Name(
        self, original: cst.Name, updated: cst.Name, porter: Rewriter
    ) -> cst.BaseExpression | None:
        return self._member(original, porter)

    def _member(self, original: cst.Name | cst.Attribute, porter: Rewriter) -> cst.Attribute | None:
        """``torch.cuda.x`` -> ``get_accelerator().x`` (the exact name, not a deeper one)."""
        from anyaccel.porting.rewriting import accelerator_attr

        qualified = porter.qualified(original)
        attr = self.match_name(qualified) if qualified is not None else None
        if attr is None or qualified is None or not qualified.endswith(f".{attr}"):
            return None
        if attr.endswith("Tensor"):
            return None  # a tensor type used as a type
        porter.rewrote(original)
        return accelerator_attr(attr)


class CudaOnlyApi(PortingRule):
    """Any other ``torch.cuda`` name, or the module itself: no agnostic equivalent."""

    code = "ACC002"
    name = "cuda-only-api"
    message = "`{name}` is CUDA-only and has no accelerator-agnostic equivalent"
    suggestion = "guard it with `get_accelerator().device_name() == 'cuda'` or drop it"
    portable = False
    guarded = True
    #: Matched last: the ``torch.cuda`` names no other rule claims.
    catch_all = True
    VALID = (
        "if get_accelerator().device_name() == 'cuda':\n"
        "    p = torch.cuda.get_device_properties(0)\n",
        "import torch\nstate = {'cuda': torch.cuda.is_available}\n",
    )
    INVALID = (
        Invalid("import torch\np = torch.cuda.get_device_properties(0)\n"),
        Invalid("import torch\nm = torch.cuda\n"),
        Invalid(
            "import torch\ntorch.cuda.set_per_process_memory_fraction(0.5)\n",
            "import torch\nfrom anyaccel import get_accelerator\n\n"
            'if get_accelerator().device_name() == "cuda":\n'
            "    torch.cuda.set_per_process_memory_fraction(0.5)\n",
        ),
    )

    def match_name(self, qualified: str) -> str | None:
        if qualified == "torch.cuda" or qualified.startswith("torch.cuda."):
            return ""
        return None


class CurrentDevice(PortingRule):
    """``torch.cuda.current_device()``: an index, where the contract has a name too."""

    code = "ACC003"
    call_rank = 70
    name = "cuda-current-device"
    message = "`{name}` returns a CUDA device index"
    suggestion = (
        "get_accelerator().current_device_name() as a device, .current_device() as an index"
    )
    portable = True
    VALID = ("i = get_accelerator().current_device()\n",)
    INVALID = (
        Invalid(
            "import torch\ni = torch.cuda.current_device()\n",
            "import torch\nfrom anyaccel import get_accelerator\n\n"
            "i = get_accelerator().current_device()\n",
        ),
        Invalid(
            "import torch\ny = x.to(device=torch.cuda.current_device())\n",
            "import torch\nfrom anyaccel import get_accelerator\n\n"
            "y = x.to(device=get_accelerator().current_device_name())\n",
        ),
    )

    def match_name(self, qualified: str) -> str | None:
        rest = _cuda_member(qualified)
        return "" if rest is not None and rest.split(".")[0] == "current_device" else None

    def rewrite_Call(
        self, original: cst.Call, updated: cst.Call, porter: Rewriter
    ) -> cst.BaseExpression | None:
        """An index where one is used, the device's name where a device is passed."""
        from anyaccel.porting.rewriting import accelerator

        if porter.qualified(original.func) != "torch.cuda.current_device" or original.args:
            return None
        porter.rewrote(original.func)
        as_device = porter.is_device_position(original)
        return accelerator("current_device_name" if as_device else "current_device")


class DefaultGenerators(PortingRule):
    """``torch.cuda.default_generators[i]``: the contract's ``default_generator(i)``."""

    code = "ACC004"
    name = "cuda-default-generators"
    message = "`{name}` is the CUDA generator list"
    suggestion = "get_accelerator().default_generator(i)"
    portable = True
    VALID = ("g = get_accelerator().default_generator(0)\n",)
    INVALID = (
        Invalid(
            "import torch\ng = torch.cuda.default_generators[0]\n",
            "import torch\nfrom anyaccel import get_accelerator\n\n"
            "g = get_accelerator().default_generator(0)\n",
        ),
    )

    def match_name(self, qualified: str) -> str | None:
        rest = _cuda_member(qualified)
        return "" if rest is not None and rest.split(".")[0] == "default_generators" else None

    def rewrite_Subscript(
        self, original: cst.Subscript, updated: cst.Subscript, porter: Rewriter
    ) -> cst.BaseExpression | None:
        import libcst as cst

        from anyaccel.porting.rewriting import accelerator

        if porter.qualified(original.value) != "torch.cuda.default_generators":
            return None
        (element,) = original.slice if len(original.slice) == 1 else (None,)
        if element is None or not isinstance(element.slice, cst.Index):
            return None
        porter.rewrote(original.value)
        return accelerator("default_generator", cst.Arg(element.slice.value))
