"""``torch.accelerator`` (ACC050) and ``get_default_backend_for_device`` (ACC051): torch's
own device-agnostic API, which finds no accelerator on a CPU host and is missing before 2.6."""

from __future__ import annotations

from typing import TYPE_CHECKING

from anyaccel.porting.rule import Invalid, PortingRule

if TYPE_CHECKING:
    import libcst as cst

    from anyaccel.porting.rewriting import Rewriter

__all__ = ["ACCELERATOR_PORTS", "DefaultBackendForDevice", "TorchAcceleratorApi"]

#: ``torch.accelerator`` functions whose meaning the contract has: name -> contract method.
ACCELERATOR_PORTS: dict[str, str] = {
    "is_available": "is_available",
    "device_count": "device_count",
    "set_device_index": "set_device",
    "set_device_idx": "set_device",
    "current_device_index": "current_device",
    "current_device_idx": "current_device",
    "synchronize": "synchronize",
}
_CURRENT_ACCELERATOR = "torch.accelerator.current_accelerator"


class TorchAcceleratorApi(PortingRule):
    """A ``torch.accelerator`` function: its contract method, where the contract has one."""

    code = "ACC050"
    call_rank = 20
    name = "torch-accelerator-api"
    message = (
        "`{name}` is torch.accelerator's (torch >= 2.6): it finds no accelerator on a "
        "CPU host and is missing from older torch"
    )
    suggestion = "{attr}"
    portable = True
    VALID = ("ok = get_accelerator().is_available()\n",)
    INVALID = (
        Invalid(
            "import torch\nok = torch.accelerator.is_available()\n",
            "import torch\nfrom anyaccel import get_accelerator\n\n"
            "ok = get_accelerator().is_available()\n",
        ),
        Invalid(
            "import torch\ntorch.accelerator.set_device_index(rank)\n",
            "import torch\nfrom anyaccel import get_accelerator\n\n"
            "get_accelerator().set_device(rank)\n",
        ),
        Invalid(
            "import torch\nd = torch.accelerator.current_accelerator()\n",
            "import torch\nfrom anyaccel import get_accelerator\n\n"
            "d = torch.device(get_accelerator().device_name())\n",
        ),
        Invalid("import torch\nwith torch.accelerator.device_index(0):\n    pass\n"),
    )

    def match_name(self, qualified: str) -> str | None:
        if qualified != "torch.accelerator" and not qualified.startswith("torch.accelerator."):
            return None
        member = qualified[len("torch.accelerator.") :].split(".")[0]
        if member == "current_accelerator":
            return "torch.device(get_accelerator().device_name())"
        if member in ACCELERATOR_PORTS:
            return f"get_accelerator().{ACCELERATOR_PORTS[member]}()"
        return "port it by hand to get_accelerator()'s contract (docs/porting.md)"

    def rewrite_Call(
        self, original: cst.Call, updated: cst.Call, porter: Rewriter
    ) -> cst.BaseExpression | None:
        import libcst as cst

        from anyaccel.porting.rewriting import accelerator, plain

        qualified = porter.qualified(original.func) or ""
        if qualified == _CURRENT_ACCELERATOR and not original.args:
            porter.rewrote()
            porter.needs("torch")
            return cst.parse_expression("torch.device(get_accelerator().device_name())")
        prefix, _, member = qualified.rpartition(".")
        method = ACCELERATOR_PORTS.get(member) if prefix == "torch.accelerator" else None
        if method is None or any(a.star for a in original.args):
            return None
        if method in ("is_available", "device_count", "current_device") and original.args:
            return None  # torch's optional device-type argument: left for the user
        porter.rewrote()
        return accelerator(method, *(plain(a) for a in updated.args))


class DefaultBackendForDevice(PortingRule):
    """``get_default_backend_for_device(acc)``: the accelerator's communication backend."""

    code = "ACC051"
    call_rank = 30
    name = "default-backend-for-device"
    message = "`{name}` picks torch's backend for a device (torch >= 2.6), not the accelerator's"
    suggestion = "get_accelerator().communication_backend_name()"
    portable = True
    VALID = ("b = get_accelerator().communication_backend_name()\n",)
    INVALID = (
        Invalid(
            "import torch\nb = torch.distributed.get_default_backend_for_device("
            "torch.accelerator.current_accelerator())\n",
            "import torch\nfrom anyaccel import get_accelerator\n\n"
            "b = get_accelerator().communication_backend_name()\n",
        ),
        Invalid("import torch\nb = torch.distributed.get_default_backend_for_device(acc)\n"),
    )

    def match_name(self, qualified: str) -> str | None:
        return "" if qualified == "torch.distributed.get_default_backend_for_device" else None

    def plan_Assign(self, node: cst.Assign, porter: Rewriter) -> None:
        """``acc = torch.accelerator.current_accelerator()``: ``acc`` names the accelerator."""
        import libcst as cst

        if (
            len(node.targets) == 1
            and isinstance(node.targets[0].target, cst.Name)
            and isinstance(node.value, cst.Call)
            and porter.qualified(node.value.func) == _CURRENT_ACCELERATOR
        ):
            porter.mark(self.code, node.targets[0].target.value)

    def rewrite_Call(
        self, original: cst.Call, updated: cst.Call, porter: Rewriter
    ) -> cst.BaseExpression | None:
        import libcst as cst

        from anyaccel.porting.rewriting import accelerator

        if porter.qualified(original.func) != "torch.distributed.get_default_backend_for_device":
            return None
        if len(original.args) != 1:
            return None
        value = original.args[0].value
        if isinstance(value, cst.Name):
            current = porter.is_marked(self.code, value.value)
        else:
            current = (
                isinstance(value, cst.Call)
                and not value.args
                and porter.qualified(value.func) == _CURRENT_ACCELERATOR
            )
        if not current:
            return None
        porter.rewrote()
        return accelerator("communication_backend_name")
