"""Lightning on a simulated PrivateUse1 device: where the Trainer and Fabric put things.

Run as ``python lightning_simulated.py``. First, before anything loads Lightning: that
``import anyaccel`` loads none of it, and that importing the integration without Lightning
(neither package; ``pytorch_lightning`` without ``lightning_fabric``), or with an unsupported
version of either package, fails and registers nothing. Then it renames PrivateUse1 to
``mlu`` (as torch_mlu does),
installs the simulated Cambricon runtime with two devices, selects it with
``DS_ACCELERATOR=mlu`` and prints one JSON line of what Lightning built. The simulated
runtime allocates no memory, so nothing trains: the checks are placement and bookkeeping
(``lightning_emulated.py`` trains on the vendor's device, over the emulated device).
"""

from __future__ import annotations

import importlib.metadata
import json
import pickle
import sys
import warnings
from collections.abc import Callable
from typing import Any

warnings.simplefilter("ignore")

import torch  # noqa: E402

from anyaccel.testing.simulated import simulate_mlu  # noqa: E402


def _error(build: Callable[[], object]) -> str:
    try:
        build()
    except Exception as error:  # the type and message are the result
        return f"{type(error).__name__}: {error}"
    return "no error"


def bad_installs() -> dict[str, Any]:
    """What a missing or unsupported Lightning does to the import, and what it leaves behind."""
    import anyaccel  # noqa: F401

    result: dict[str, Any] = {
        "loaded": sorted(
            m
            for m in sys.modules
            if m.startswith(("lightning", "pytorch_lightning", "anyaccel.integ"))
        )
    }
    # None in sys.modules is what `import` treats as absent. Neither Lightning package:
    hidden = ("lightning", "pytorch_lightning", "lightning_fabric")
    sys.modules.update(dict.fromkeys(hidden))
    result["missing"] = _error(lambda: importlib.import_module("anyaccel.integrations.lightning"))
    # Only pytorch_lightning, without the lightning_fabric it needs:
    del sys.modules["pytorch_lightning"]
    result["no_fabric"] = _error(lambda: importlib.import_module("anyaccel.integrations.lightning"))
    for name in hidden[1:]:
        sys.modules.pop(name, None)
    # The standalone packages out of range, the `lightning` package hidden:
    real_version = importlib.metadata.version
    importlib.metadata.version = lambda name: (
        "2.3.3" if name == "pytorch_lightning" else real_version(name)
    )
    result["standalone_too_old"] = _error(
        lambda: importlib.import_module("anyaccel.integrations.lightning")
    )
    importlib.metadata.version = real_version
    del sys.modules["lightning"]
    real_version = importlib.metadata.version
    importlib.metadata.version = lambda name: "2.3.3" if name == "lightning" else real_version(name)
    result["too_old"] = _error(lambda: importlib.import_module("anyaccel.integrations.lightning"))
    importlib.metadata.version = real_version
    from lightning.pytorch.accelerators import AcceleratorRegistry
    from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector
    from pytorch_lightning.accelerators import AcceleratorRegistry as StandaloneRegistry
    from pytorch_lightning.trainer.connectors.accelerator_connector import (
        _AcceleratorConnector as StandaloneConnector,
    )

    result["registered"] = "anyaccel" in AcceleratorRegistry or "anyaccel" in StandaloneRegistry
    result["hooked"] = any(
        hasattr(connector._choose_strategy, "__anyaccel_hook__")
        for connector in (_AcceleratorConnector, StandaloneConnector)
    )
    result["half_imported"] = "anyaccel.integrations.lightning" in sys.modules
    return result


def main() -> dict[str, Any]:
    """Build Trainers and Fabrics on the simulated device; report what they chose."""
    result: dict[str, Any] = {"bad_installs": bad_installs()}
    torch.utils.rename_privateuse1_backend("mlu")
    with simulate_mlu(device_count=2) as module:
        import lightning as L
        from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy

        import anyaccel
        from anyaccel.integrations.lightning import AnyAccelerator

        quiet = {
            "logger": False,
            "enable_checkpointing": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
        }

        def trainer(**kwargs: Any) -> L.Trainer:
            return L.Trainer(accelerator="anyaccel", **quiet, **kwargs)

        def placement(strategy: Any, precision: Any) -> dict[str, Any]:
            backend = getattr(strategy, "_get_process_group_backend", None)
            scaler = getattr(precision, "scaler", None)
            return {
                "strategy": type(strategy).__name__,
                "root_device": str(strategy.root_device),
                "backend": backend() if backend is not None else None,
                "precision": type(precision).__name__,
                "precision_device": getattr(precision, "device", None),
                "scaler_device": getattr(scaler, "_device", None),
            }

        result["selected"] = type(anyaccel.get_accelerator()).__name__
        result["lightning"] = [L.__version__, L.__file__]
        one = trainer(devices=1)
        result["trainer_one"] = placement(one.strategy, one.precision_plugin)
        auto = trainer(precision="bf16-mixed")
        result["trainer_auto"] = placement(auto.strategy, auto.precision_plugin)
        fp16 = trainer(devices=[1], precision="16-mixed")
        result["trainer_fp16"] = placement(fp16.strategy, fp16.precision_plugin)
        named = trainer(devices=2, strategy="ddp_spawn")
        result["trainer_ddp_spawn"] = placement(named.strategy, named.precision_plugin)
        result["trainer_ddp_spawn"]["start_method"] = named.strategy._start_method

        fabric_one = L.Fabric(accelerator="anyaccel", devices=1, precision="bf16-mixed")
        result["fabric_one"] = placement(fabric_one.strategy, fabric_one._precision)
        fabric = L.Fabric(accelerator="anyaccel", precision="16-mixed")
        result["fabric_auto"] = placement(fabric.strategy, fabric._precision)
        result["fabric_device"] = str(fabric.device)

        # Setting up the second device makes it current through the vendor module.
        fp16.strategy.setup_environment()
        result["current_after_setup"] = module.current_device()
        module.allocate(4096, device=1)
        stats = fp16.accelerator.get_device_stats(torch.device("mlu", 1))
        result["stats"] = {k: stats.get(k) for k in ("memory_allocated", "total_memory")}

        # DDP wraps the model on the vendor module's streams, not torch.cuda's: the default
        # stream of the root device; a side stream while a graph is being captured.
        import anyaccel.integrations.lightning.classes as integration

        vendor = module
        wrapped: list[Any] = []
        entered: list[Any] = []  # the device of each stream made current
        streams = ("is_current_stream_capturing", "default_stream", "Stream", "stream")
        make_current = vendor.stream

        def record_stream(stream: Any) -> Any:
            entered.append(stream.device)
            return make_current(stream)

        def record_ddp(module: torch.nn.Module, device_ids: Any, **kwargs: Any) -> str:
            calls = [c for c in vendor.calls if c in streams]
            wrapped.append([device_ids, calls, entered[-1] if calls[-1:] == ["stream"] else None])
            return "ddp"

        vendor.stream = record_stream
        integration.DistributedDataParallel = record_ddp  # type: ignore[assignment,misc]
        second = trainer(devices=[1], strategy="ddp")  # one rank on mlu:1
        accelerator = anyaccel.get_accelerator()
        for build in (
            lambda: auto.strategy._setup_model(torch.nn.Linear(1, 1)),
            lambda: fabric.strategy.setup_module(torch.nn.Linear(1, 1)),
            lambda: second.strategy._setup_model(torch.nn.Linear(1, 1)),
        ):
            del vendor.calls[:]
            build()
        warns = getattr(torch._C, "_warn_on_accumulate_grad_stream_mismatch", None)  # torch 2.10+
        warned = [warns() if warns is not None else None]
        with accelerator.capture_to_graph(accelerator.create_graph()):
            del vendor.calls[:]
            auto.strategy._setup_model(torch.nn.Linear(1, 1))
        warned.append(warns() if warns is not None else None)
        result["ddp_wrapped"] = wrapped
        result["accumulate_grad_warning"] = warned

        bound = AnyAccelerator(anyaccel.get_accelerator())
        copy = pickle.loads(pickle.dumps(bound))
        result["bound_copy"] = [type(copy).__name__, copy.device_type(), copy.auto_device_count()]

        result["errors"] = {
            "cpu_single_device_name": _error(lambda: trainer(strategy="single_device")),
            "cpu_single_device": _error(lambda: trainer(strategy=SingleDeviceStrategy("cpu"))),
            "stock_ddp": _error(lambda: trainer(devices=2, strategy=DDPStrategy())),
            "too_many": _error(lambda: trainer(devices=3)),
            "bad_index": _error(lambda: L.Fabric(accelerator="anyaccel", devices=[0, 2])),
            "setup_cpu": _error(lambda: one.accelerator.setup_device(torch.device("cpu"))),
        }
        # Without the hooks (a Lightning whose private code changed), the Trainer's DDP would
        # wrap the model on torch.cuda streams: refused at set-up, before any process group.
        from anyaccel.integrations.lightning import hooks, register, trainer_kwargs

        hooks.unhook()
        try:
            unhooked = L.Trainer(**trainer_kwargs(devices=2), **quiet)
            result["errors"]["unhooked_ddp"] = _error(unhooked.strategy.setup_environment)
        finally:
            register()
    return result


if __name__ == "__main__":
    print(json.dumps(main()))
