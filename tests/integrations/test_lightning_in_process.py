"""Lightning's integration in this process: registration, hooks, refusals, the helper's choices.

The multi-process fits and the simulated device's child runs are in ``test_lightning.py``;
these tests build Trainers, Fabrics and ``AnyAccelerator`` objects here, on the CPU or on two
simulated GPUs, and check what the integration registers, refuses and puts back.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "lightning", reason="the Lightning integration needs `pip install anyaccel[lightning]`"
)

import torch

import anyaccel
from anyaccel.backends.cuda import CudaAccelerator
from anyaccel.testing.simulated import simulate_cuda

pytestmark = pytest.mark.slow


# ---------------------------------------------------------------------- in this process
@pytest.fixture
def integration(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The integration, with anyaccel forced to the CPU."""
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    import anyaccel.integrations.lightning as module

    return module


@pytest.fixture
def on_two_gpus(integration: Any) -> Iterator[Any]:
    """An ``AnyAccelerator`` bound to a CUDA backend with two simulated GPUs."""
    with simulate_cuda(device_count=2):
        yield integration.AnyAccelerator(CudaAccelerator())


@pytest.mark.parametrize(
    ("devices", "indices"),
    [(1, [0]), (2, [0, 1]), ("auto", [0, 1]), (-1, [0, 1]), ("-1", [0, 1]), ("2", [0, 1]),
     ("0,1", [0, 1]), ("1,", [1]), ([1], [1]), ((1, 0), [1, 0])],
)  # fmt: skip
def test_parse_devices_reads_every_form_lightning_accepts(
    devices: object, indices: list[int], on_two_gpus: Any
) -> None:
    assert on_two_gpus.parse_devices(devices) == indices
    assert type(on_two_gpus).parse_devices(devices) == indices  # Lightning asks the class
    assert on_two_gpus.get_parallel_devices(devices) == [torch.device("cuda", i) for i in indices]


@pytest.mark.parametrize(
    ("devices", "words"),
    [(3, ["devices=3", "3 device(s)", "has 2"]), ([0, 2], ["index 2"]), ("0,5", ["index 5"]),
     (0, ["devices=0"]), (-2, ["devices=-2"]), (True, ["devices=True"]), (None, ["devices=None"]),
     ("two", ["devices='two'"]), ([0, 0], ["distinct"]), ([], ["distinct"]), (1.5, ["1.5"]),
     (["0"], ["indices"])],
)  # fmt: skip
def test_parse_devices_refuses_what_the_device_count_cannot_give(
    devices: object, words: list[str], on_two_gpus: Any, integration: Any
) -> None:
    with pytest.raises(integration.LightningSetupError) as caught:
        on_two_gpus.parse_devices(devices)
    for word in words:
        assert word in str(caught.value)
    assert "Pass devices=N with 1 <= N <= 2" in str(caught.value)


def test_device_queries_follow_the_bound_backend(on_two_gpus: Any) -> None:
    assert type(on_two_gpus).__name__ == "AnyAccelerator[CudaAccelerator]"
    assert (on_two_gpus.name(), on_two_gpus.device_type()) == ("anyaccel", "cuda")
    assert type(on_two_gpus).is_available() and type(on_two_gpus).auto_device_count() == 2


def test_teardown_empties_the_backends_cache(on_two_gpus: Any) -> None:
    module = torch.cuda
    del module.calls[:]  # type: ignore[attr-defined]
    on_two_gpus.teardown()
    assert module.calls == ["empty_cache"]  # type: ignore[attr-defined]


def test_trainer_setup_refuses_a_strategy_off_the_device(
    on_two_gpus: Any, integration: Any
) -> None:
    from types import SimpleNamespace

    from lightning.pytorch.plugins.precision import MixedPrecision, Precision
    from lightning.pytorch.strategies import SingleDeviceStrategy

    def trainer(strategy: Any, precision: Any) -> Any:
        strategy.precision_plugin = precision
        return SimpleNamespace(strategy=strategy)

    on_two_gpus.setup(trainer(integration.AnySingleDeviceStrategy("cuda:1"), Precision()))
    with pytest.raises(integration.LightningSetupError, match="rooted on cpu"):
        on_two_gpus.setup(trainer(SingleDeviceStrategy("cpu"), Precision()))
    with pytest.raises(integration.LightningSetupError, match="autocasts on 'cpu'"):
        on_two_gpus.setup(
            trainer(
                integration.AnySingleDeviceStrategy("cuda:0"), MixedPrecision("bf16-mixed", "cpu")
            )
        )


def test_setup_device_refuses_another_device_type(on_two_gpus: Any, integration: Any) -> None:
    with pytest.raises(integration.LightningSetupError, match=r"set up cpu.*runs on 'cuda'"):
        on_two_gpus.setup_device(torch.device("cpu"))


def test_on_the_cpu_devices_counts_processes(integration: Any) -> None:
    cpu = integration.AnyAccelerator()
    assert (cpu.device_type(), cpu.auto_device_count(), cpu.is_available()) == ("cpu", 1, True)
    assert cpu.parse_devices(2) == 2 and cpu.parse_devices("auto") == 1
    assert cpu.get_parallel_devices(2) == [torch.device("cpu")] * 2
    for bad in (0, "x", True, [0]):
        with pytest.raises(integration.LightningSetupError, match="process count"):
            cpu.parse_devices(bad)
    assert set(cpu.get_device_stats("cpu")) <= {
        "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
        "total_memory", "available_memory",
    }  # fmt: skip
    cpu.setup_device(torch.device("cpu"))
    cpu.teardown()


def test_ddp_on_cpu_ranks_pauses_at_exit_and_on_an_accelerator_does_not(
    integration: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    import anyaccel.distributed.exit_grace as exit_grace
    from anyaccel.settings import LAUNCHERS

    monkeypatch.setattr(exit_grace, "install_exit_grace", lambda: calls.append("x") or True)
    for names in LAUNCHERS:  # not a launched rank (asking the accelerator there installs too)
        for name in (names.rank, names.world_size, names.local_rank):
            monkeypatch.delenv(name, raising=False)
    for strategy in (integration.AnyDDPStrategy, integration.AnyFabricDDPStrategy):
        cpu = strategy(accelerator=integration.AnyAccelerator())
        assert cpu._get_process_group_backend() == "anyaccel_shm"
        with simulate_cuda(device_count=2):
            gpus = strategy(accelerator=integration.AnyAccelerator(CudaAccelerator()))
            assert gpus._get_process_group_backend() == "nccl"
    assert calls == ["x", "x"]  # the CPU jobs only: torch's gloo exit abort (exit_grace)


def test_unsupported_precision_is_refused_for_trainer_and_fabric(
    integration: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lightning as L

    from anyaccel.backends.cpu import CpuAccelerator

    # A CPU without bfloat16 or float16 kernels: neither half type, whatever this host has.
    monkeypatch.setattr(CpuAccelerator, "is_fp16_supported", lambda self: False)
    monkeypatch.setattr(CpuAccelerator, "is_bf16_supported", lambda self: False)
    assert not anyaccel.get_accelerator().is_bf16_supported()
    for build in (
        lambda: L.Trainer(accelerator="anyaccel", precision="bf16-mixed", logger=False),
        lambda: L.Fabric(accelerator="anyaccel", precision="bf16-mixed"),
    ):
        with pytest.raises(
            integration.LightningSetupError,
            match=r"'bf16-mixed' is not supported.*Use precision='32-true' \(the device",
        ):
            build()


def test_16_mixed_on_the_cpu_runs_bf16_mixed_with_lightnings_warning_as_stock_lightning(
    integration: Any,
) -> None:
    import lightning as L

    stock = L.Trainer(accelerator="cpu", precision="16-mixed", logger=False)
    with pytest.warns(UserWarning, match=r"fp16 is not supported on CPU\. Using `precision='bf16"):
        trainer = L.Trainer(accelerator="anyaccel", precision="16-mixed", logger=False)
    with pytest.warns(UserWarning, match=r"Fabric\(accelerator='anyaccel', precision='16-mixed'"):
        fabric = L.Fabric(accelerator="anyaccel", precision="16-mixed")
    with pytest.warns(UserWarning, match="Using `precision='bf16-mixed'` instead"):
        kwargs = integration.trainer_kwargs(precision="16-mixed")
    plugins = {
        "stock": stock.precision_plugin,
        "trainer": trainer.precision_plugin,
        "fabric": fabric._precision,
        "trainer_kwargs": kwargs["plugins"][0],
    }
    for name, plugin in plugins.items():  # bf16 autocast on the CPU, no GradScaler
        assert (plugin.precision, plugin.device, plugin.scaler) == ("bf16-mixed", "cpu", None), name
    assert trainer.precision == stock.precision == "bf16-mixed"


@pytest.mark.parametrize("argument", ["cpu", object()])
def test_an_accelerator_argument_that_is_no_accelerator_is_named(
    integration: Any, argument: object
) -> None:
    shown = "the string 'cpu'" if argument == "cpu" else "<object object at"
    builds = {
        "AnyAccelerator()": lambda: integration.AnyAccelerator(argument),
        "AnyMixedPrecision(accelerator=...)": lambda: integration.AnyMixedPrecision(
            "bf16-mixed", accelerator=argument
        ),
        "AnyFabricMixedPrecision(accelerator=...)": lambda: integration.AnyFabricMixedPrecision(
            "bf16-mixed", accelerator=argument
        ),
    }
    for call, build in builds.items():  # the old code raised AttributeError from inside
        with pytest.raises(anyaccel.InvalidAcceleratorError) as caught:
            build()
        assert str(caught.value).startswith(f"{call} takes an accelerator object")
        assert shown in str(caught.value)


def test_registration_is_idempotent_and_keeps_lightnings_names(integration: Any) -> None:
    from lightning.fabric.accelerators import ACCELERATOR_REGISTRY, CPUAccelerator
    from lightning.fabric.strategies import STRATEGY_REGISTRY
    from lightning.pytorch.accelerators import AcceleratorRegistry
    from lightning.pytorch.strategies import DDPStrategy, StrategyRegistry

    integration.register()
    integration.register()
    for registry in (AcceleratorRegistry, ACCELERATOR_REGISTRY):
        assert registry["anyaccel"]["accelerator"] is integration.AnyAccelerator
        assert registry["cpu"]["accelerator"].__name__ == "CPUAccelerator"
    assert ACCELERATOR_REGISTRY["cpu"]["accelerator"] is CPUAccelerator
    assert StrategyRegistry["ddp"]["strategy"] is DDPStrategy
    assert StrategyRegistry["anyaccel_ddp"]["strategy"] is integration.AnyDDPStrategy
    assert STRATEGY_REGISTRY["anyaccel_ddp_spawn"]["strategy"] is integration.AnyFabricDDPStrategy
    assert StrategyRegistry["anyaccel_ddp_spawn"]["init_params"] == {"start_method": "spawn"}
    from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector

    hooked = _AcceleratorConnector._choose_strategy
    assert hasattr(hooked, "__anyaccel_hook__")
    assert not hasattr(hooked.__wrapped__, "__anyaccel_hook__")  # wrapped once, not per call


def test_a_private_name_lightning_dropped_is_reported(
    integration: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning.fabric.connector import _Connector

    from anyaccel.integrations.lightning import hooks

    assert hooks.missing_private_names() == []
    monkeypatch.delattr(_Connector, "_lazy_init_strategy")
    assert hooks.missing_private_names() == [
        "lightning.fabric.connector._Connector._lazy_init_strategy: no such method"
    ]


def test_unhook_restores_lightning_and_register_hooks_again(integration: Any) -> None:
    import lightning as L
    from lightning.fabric.connector import _Connector
    from lightning.pytorch.strategies import DDPStrategy
    from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector

    from anyaccel.integrations.lightning import hooks

    hooked = _AcceleratorConnector._choose_strategy
    try:
        integration.unhook()
        assert not hooks.installed()
        for connector in (_AcceleratorConnector, _Connector):
            for name in ("_choose_strategy", "_check_config_and_set_final_flags"):
                assert not hasattr(getattr(connector, name), "__anyaccel_hook__")
        assert _AcceleratorConnector._choose_strategy is hooked.__wrapped__
        assert "_get_process_group_backend" not in vars(integration.AnyDDPStrategy)
        trainer = L.Trainer(accelerator="anyaccel", devices=2, logger=False)
        assert type(trainer.strategy) is DDPStrategy  # Lightning's own choice, unhooked
    finally:
        assert integration.register() == []
    assert hooks.installed()
    assert hasattr(_AcceleratorConnector._choose_strategy, "__anyaccel_hook__")
    trainer = L.Trainer(accelerator="anyaccel", devices=2, logger=False)
    assert type(trainer.strategy) is integration.AnyDDPStrategy


def test_registration_refuses_to_replace_another_anyaccel_entry(integration: Any) -> None:
    from lightning.fabric.strategies import STRATEGY_REGISTRY
    from lightning.pytorch.accelerators import CPUAccelerator
    from lightning.pytorch.strategies import StrategyRegistry

    # Not monkeypatch.setitem: it saves the old value with the registry's get(), which
    # instantiates the class. The conflict is in the last registry checked.
    ours = dict.__getitem__(STRATEGY_REGISTRY, "anyaccel_ddp_fork")
    try:
        STRATEGY_REGISTRY["anyaccel_ddp_fork"] = {"strategy": CPUAccelerator, "init_params": {}}
        StrategyRegistry.remove("anyaccel_ddp_fork")
        with pytest.raises(integration.LightningSetupError, match="will not replace it"):
            integration.register()
        assert "anyaccel_ddp_fork" not in StrategyRegistry  # nothing registered: all or none
    finally:
        STRATEGY_REGISTRY["anyaccel_ddp_fork"] = ours
        integration.register()
    assert StrategyRegistry["anyaccel_ddp_fork"]["strategy"] is integration.AnyDDPStrategy


def test_strategies_not_adapted_to_anyaccel_are_refused(integration: Any) -> None:
    import lightning as L
    from lightning.pytorch.strategies import ModelParallelStrategy

    with pytest.raises(
        integration.LightningSetupError, match="DataParallelStrategy is not adapted"
    ):
        L.Fabric(accelerator="anyaccel", strategy="dp")
    with pytest.raises(integration.LightningSetupError, match="ModelParallelStrategy is not adapt"):
        L.Trainer(accelerator="anyaccel", strategy=ModelParallelStrategy(), logger=False)


def test_other_accelerators_are_left_to_lightning(integration: Any) -> None:
    import lightning as L
    from lightning.pytorch.plugins.precision import MixedPrecision

    trainer = L.Trainer(accelerator="cpu", devices=1, precision="bf16-mixed", logger=False)
    assert type(trainer.strategy).__name__ == "SingleDeviceStrategy"
    assert type(trainer.precision_plugin) is MixedPrecision


def test_a_version_outside_the_range_is_refused(
    integration: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.metadata

    from anyaccel.integrations.lightning.versions import require_lightning

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "2.3.3")
    with pytest.raises(integration.LightningUnavailableError) as caught:
        require_lightning()
    assert "lightning 2.3.3 is installed" in str(caught.value)
    assert integration.SUPPORTED_LIGHTNING in str(caught.value)
    assert "pip install -e '.[lightning]'" in str(caught.value)


def test_a_newer_release_is_not_refused_by_a_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    from anyaccel.integrations.lightning.versions import require_lightning

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "3.0.0")
    assert require_lightning() == {"lightning": "3.0.0", "pytorch_lightning": "3.0.0"}


def test_both_packages_registries_and_connectors_are_anyaccels(integration: Any) -> None:
    from lightning_fabric.accelerators import ACCELERATOR_REGISTRY
    from lightning_fabric.connector import _Connector
    from lightning_fabric.strategies import STRATEGY_REGISTRY
    from pytorch_lightning.accelerators import AcceleratorRegistry
    from pytorch_lightning.strategies import DDPStrategy, StrategyRegistry
    from pytorch_lightning.trainer.connectors.accelerator_connector import _AcceleratorConnector

    standalone = integration.PYTORCH_LIGHTNING
    flavours = [(name, flavour.name) for name, flavour in integration.FLAVOURS.items()]
    assert flavours == [("lightning", "lightning"), ("pytorch_lightning", "pytorch_lightning")]
    assert integration.FLAVOURS["pytorch_lightning"] is standalone
    assert integration.AnyAccelerator is integration.LIGHTNING.AnyAccelerator
    assert standalone.AnyAccelerator is not integration.AnyAccelerator
    assert (standalone.trainer_package, standalone.fabric_package) == (
        "pytorch_lightning", "lightning_fabric"
    )  # fmt: skip
    for registry in (AcceleratorRegistry, ACCELERATOR_REGISTRY):
        assert registry["anyaccel"]["accelerator"] is standalone.AnyAccelerator
    assert StrategyRegistry["ddp"]["strategy"] is DDPStrategy
    assert StrategyRegistry["anyaccel_ddp"]["strategy"] is standalone.AnyDDPStrategy
    assert issubclass(standalone.AnyDDPStrategy, DDPStrategy)
    fork = STRATEGY_REGISTRY["anyaccel_ddp_fork"]
    assert (fork["strategy"], fork["init_params"]) == (
        standalone.AnyFabricDDPStrategy, {"start_method": "fork"}
    )  # fmt: skip
    for connector in (_AcceleratorConnector, _Connector):
        assert hasattr(connector._choose_strategy, "__anyaccel_hook__")


def test_standalone_trainer_picks_its_own_ddp_and_precision(integration: Any) -> None:
    import lightning_fabric
    import pytorch_lightning

    standalone = integration.PYTORCH_LIGHTNING
    trainer = pytorch_lightning.Trainer(
        accelerator="anyaccel",
        devices=2,
        strategy="ddp_spawn",
        precision="bf16-mixed",
        logger=False,
    )
    assert type(trainer.strategy) is standalone.AnyDDPStrategy
    assert trainer.strategy._start_method == "spawn"
    assert type(trainer.precision_plugin) is standalone.AnyMixedPrecision
    fabric = lightning_fabric.Fabric(accelerator="anyaccel", precision="bf16-mixed")
    assert type(fabric.strategy) is standalone.AnyFabricSingleDeviceStrategy
    assert type(fabric._precision) is standalone.AnyFabricMixedPrecision
    # What spawn sends to its children: each class is found again by its name.
    copy = pickle.loads(pickle.dumps((trainer.accelerator, trainer.strategy)))
    assert [type(x) for x in copy] == [standalone.AnyAccelerator, standalone.AnyDDPStrategy]
    # A stock strategy of the standalone package is refused like the unified package's.
    with pytest.raises(integration.LightningSetupError, match="DDPStrategy is not adapted"):
        pytorch_lightning.Trainer(
            accelerator="anyaccel", devices=2, strategy=pytorch_lightning.strategies.DDPStrategy(),
            logger=False,
        )  # fmt: skip


@pytest.mark.parametrize(
    ("api", "given", "words"),
    [
        ("pytorch_lightning.Trainer", "accelerator", ["LIGHTNING.AnyAccelerator is", "'lightning'",
         "PYTORCH_LIGHTNING.AnyAccelerator instead"]),
        ("lightning.Trainer", "strategy", ["PYTORCH_LIGHTNING.AnyDDPStrategy is",
         "'pytorch_lightning'", "a lightning.pytorch.Trainer",
         "lightning.LIGHTNING.AnyDDPStrategy instead"]),
        ("lightning_fabric.Fabric", "plugins", ["LIGHTNING.AnyFabricMixedPrecision is",
         "a lightning_fabric.Fabric", "PYTORCH_LIGHTNING.AnyFabricMixedPrecision instead"]),
    ],
)  # fmt: skip
def test_another_packages_anyaccel_instance_is_refused_by_name(
    api: str, given: str, words: list[str], integration: Any
) -> None:
    import importlib

    module_name, _, name = api.rpartition(".")
    build = getattr(importlib.import_module(module_name), name)
    other = integration.LIGHTNING if module_name != "lightning" else integration.PYTORCH_LIGHTNING
    value = {
        "accelerator": lambda: other.AnyAccelerator(),
        "strategy": lambda: other.AnyDDPStrategy(),
        "plugins": lambda: [other.AnyFabricMixedPrecision("bf16-mixed")],
    }[given]()
    arguments = {"accelerator": "anyaccel", given: value}
    if name == "Trainer":
        arguments["logger"] = False
    with pytest.raises(integration.LightningSetupError) as caught:
        build(**arguments)
    for word in words:
        assert word in str(caught.value), str(caught.value)


# ---------------------------------------------------------------------- the helper's choices
def test_trainer_kwargs_returns_anyaccels_objects(integration: Any) -> None:
    kwargs = integration.trainer_kwargs(devices=2, precision="bf16-mixed", strategy="ddp_spawn")
    assert set(kwargs) == {"accelerator", "devices", "num_nodes", "strategy", "plugins"}
    assert type(kwargs["accelerator"]) is integration.AnyAccelerator
    assert type(kwargs["strategy"]) is integration.AnyDDPStrategy
    assert kwargs["strategy"]._start_method == "spawn"
    assert kwargs["strategy"].process_group_backend == "anyaccel_shm"
    [plugin] = kwargs["plugins"]
    assert (type(plugin), plugin.device) == (integration.AnyMixedPrecision, "cpu")
    fabric = integration.fabric_kwargs(devices=1, precision="32-true")
    assert type(fabric["strategy"]) is integration.AnyFabricSingleDeviceStrategy
    assert (fabric["precision"], "plugins" in fabric) == ("32-true", False)
    standalone = integration.trainer_kwargs(package="pytorch_lightning")
    assert type(standalone["strategy"]) is integration.PYTORCH_LIGHTNING.AnySingleDeviceStrategy


def test_trainer_kwargs_on_a_bound_accelerator_uses_its_devices_and_backend(
    integration: Any,
) -> None:
    import lightning as L

    with simulate_cuda(device_count=2):
        kwargs = integration.trainer_kwargs(devices=[1], accelerator=CudaAccelerator())
        assert kwargs["strategy"].root_device == torch.device("cuda", 1)
        ddp = integration.fabric_kwargs(devices=2, accelerator=CudaAccelerator())
        assert ddp["strategy"].process_group_backend == "nccl"
        trainer = L.Trainer(**integration.trainer_kwargs(devices=1), logger=False)
    assert trainer.strategy.root_device == torch.device("cpu")  # the selected (CPU) backend


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"strategy": "fsdp"}, ["strategy='fsdp' is not one anyaccel builds", "anyaccel_ddp"]),
        ({"strategy": "single_device", "devices": 2}, ["runs one device", "devices=1"]),
        ({"package": "lightning_v3"}, ["package='lightning_v3'", "'pytorch_lightning'"]),
        ({"num_nodes": 0}, ["num_nodes=0"]),
        ({"devices": 0}, ["devices=0", "process count"]),
        ({"strategy": "auto", "precision": "bf16-mixed"}, ["'bf16-mixed' is not supported"]),
    ],
)
def test_trainer_kwargs_refuses_what_it_cannot_build(
    arguments: dict[str, Any], words: list[str], integration: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from anyaccel.backends.cpu import CpuAccelerator

    monkeypatch.setattr(CpuAccelerator, "is_fp16_supported", lambda self: False)
    monkeypatch.setattr(CpuAccelerator, "is_bf16_supported", lambda self: False)
    with pytest.raises(integration.LightningSetupError) as caught:
        integration.trainer_kwargs(**arguments)
    for word in words:
        assert word in str(caught.value), str(caught.value)


def test_trainer_kwargs_refuses_a_strategy_object_off_the_device(integration: Any) -> None:
    from lightning.pytorch.strategies import DDPStrategy

    with pytest.raises(integration.LightningSetupError, match="DDPStrategy is not adapted"):
        integration.trainer_kwargs(devices=2, strategy=DDPStrategy())
    given = integration.AnyDDPStrategy()
    assert integration.trainer_kwargs(devices=2, strategy=given)["strategy"] is given


# ---------------------------------------------------------------------- Lightning's private names
def _lightning_private_names() -> set[str]:
    """Every single-underscore name Lightning's connectors, strategies and plugins define or use."""
    import importlib
    import inspect
    import pkgutil

    from anyaccel.integrations.lightning.hooks import _names_used_by

    names: set[str] = set()
    roots = [
        "lightning.pytorch.trainer.connectors", "lightning.pytorch.strategies",
        "lightning.pytorch.accelerators", "lightning.pytorch.plugins.precision",
        "lightning.fabric.strategies", "lightning.fabric.accelerators",
        "lightning.fabric.plugins.precision",
    ]  # fmt: skip
    modules = [importlib.import_module(name) for name in ("lightning.fabric.connector",
               "lightning.fabric.fabric", "lightning.pytorch.trainer.trainer")]  # fmt: skip
    for root in roots:
        package = importlib.import_module(root)
        modules.append(package)
        for info in pkgutil.iter_modules(package.__path__, root + "."):
            try:
                modules.append(importlib.import_module(info.name))
            except ImportError:  # an optional dependency (deepspeed, xla...) is missing
                continue
    for module in modules:
        names |= set(vars(module))  # its private functions and classes (_Connector...)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__.startswith("lightning."):
                names |= set(dir(cls)) | _names_used_by(cls)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def test_lightnings_private_names_are_used_only_in_the_hooks_module(integration: Any) -> None:
    import ast

    from anyaccel.integrations.lightning.hooks import PRIVATE_NAMES

    theirs = _lightning_private_names()
    listed = {entry.name for entry in PRIVATE_NAMES}
    source = Path(anyaccel.__file__).parent
    hooks = source / "integrations" / "lightning" / "hooks.py"
    found: dict[str, set[str]] = {}
    for path in sorted(source.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "lightning" not in text.lower():  # a module that never meets Lightning
            continue
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in theirs:
                found.setdefault(node.attr, set()).add(str(path.relative_to(source)))
            if isinstance(node, ast.Constant) and node.value in theirs:  # getattr, load by name
                found.setdefault(str(node.value), set()).add(str(path.relative_to(source)))
    ours = {"_bound", "_classes", "_sides"}  # anyaccel's own attributes of its own classes
    outside = {
        name: files for name, files in found.items()
        if name not in ours and files != {str(hooks.relative_to(source))}
    }  # fmt: skip
    assert outside == {}
    assert {"_choose_strategy", "_parallel_devices", "_setup_model"} <= set(found)  # it looks
    assert {name for name in found if name not in ours} <= listed
