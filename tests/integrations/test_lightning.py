"""Lightning's Trainer and Fabric on anyaccel (``anyaccel.integrations.lightning``).

Three child runs start together (they overlap Lightning's slow import): BoringModel trained
under ``torchrun --nproc-per-node 2`` (DDP, gloo) with ``accelerator="anyaccel"`` and with
Lightning's own ``"cpu"``, with each package (``lightning``; ``pytorch_lightning`` +
``lightning_fabric``); the standalone packages' one-process runs with ``lightning`` hidden;
and Trainers and Fabrics built on a simulated PrivateUse1 device (two Cambricon MLUs), after
the import's failure cases. The one-process fits and the bad-input tests run in this process.
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
import socket
import subprocess
import sys
import warnings
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

from .conftest import finish_launch, ours_then_this_runs_path

pytestmark = pytest.mark.slow

SUPPORTED = ">=2.4"  # the range docs/lightning.md states

HERE = Path(__file__).parent
TIMEOUT = 300  # seconds per child run: Lightning's import alone is slow on a loaded box


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _env(backend: str) -> dict[str, str]:
    """A child's environment on ``backend``, importing the Lightning this run imports."""
    path = ours_then_this_runs_path()
    env = dict(os.environ, PYTHONPATH=path, DS_ACCELERATOR=backend, OMP_NUM_THREADS="1")
    env.pop("ANYACCEL_SHM_BACKEND", None)  # the default: anyaccel_shm on CPU ranks
    return env


class _Child:
    """A child process started now and waited for on first use (with a timeout)."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], out: Path) -> None:
        self.name, self.out = name, out
        self.log = out / f"{name}.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=out
            )

    def wait(self) -> str:
        """The child's output once it exits 0 (the test fails with its log otherwise)."""
        return finish_launch(self.process, self.log, self.name, TIMEOUT)


def _torchrun() -> list[str]:
    """``torchrun --nproc-per-node 2`` on a port of its own."""
    return [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--master-addr", "127.0.0.1", "--master-port", str(_free_port()),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def children(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, _Child]]:
    """Start both child runs at once."""
    out = tmp_path_factory.mktemp("lightning")
    (out / "ddp").mkdir()
    torchrun = _torchrun()
    train = str(HERE / "lightning_train.py")
    simulated = [sys.executable, str(HERE / "lightning_simulated.py")]
    standalone = [sys.executable, train, "--standalone-only"]
    (out / "fallback").mkdir()
    fallback = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--master-addr", "127.0.0.1", "--master-port", str(_free_port()),
        str(HERE / "lightning_fallback.py"), "fallback",
    ]  # fmt: skip
    sync = str(HERE / "lightning_sync_dist.py")
    for name in ("sync_shm", "sync_gloo"):
        (out / name).mkdir()
    started = {
        "ddp": _Child("ddp", [*torchrun, train, "ddp"], _env("cpu"), out),
        "sync_shm": _Child("sync_shm", [*_torchrun(), sync, "sync_shm"], _env("cpu"), out),
        "sync_gloo": _Child(
            "sync_gloo",
            [*_torchrun(), sync, "sync_gloo"],
            {**_env("cpu"), "ANYACCEL_SHM_BACKEND": "0"},
            out,
        ),
        "fallback": _Child("fallback", fallback, _env("cpu"), out),
        "standalone": _Child("standalone", standalone, _env("cpu"), out),
        "simulated": _Child("simulated", simulated, _env("mlu"), out),
    }
    yield started
    for child in started.values():
        if child.process.poll() is None:
            child.process.kill()
            child.process.wait()


def _ranks(child: _Child, expected: int) -> list[dict[str, Any]]:
    child.wait()
    files = sorted((child.out / child.name).glob("rank*.json"))
    assert len(files) == expected, f"{child.name}: {files}"
    return [json.loads(path.read_text()) for path in files]


@pytest.fixture(scope="module", params=["lightning", "pytorch_lightning"])
def package(request: pytest.FixtureRequest) -> str:
    """The Lightning package a run imports its Trainer and Fabric from."""
    name: str = request.param
    return name


@pytest.fixture(scope="module")
def single(children: dict[str, _Child], package: str) -> dict[str, Any]:
    """The one-process runs of ``package``, here (while the children start up)."""
    from .lightning_train import train_all

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DS_ACCELERATOR", "cpu")
        patch.setenv("PL_GLOBAL_SEED", "0")  # seed_everything sets it: removed again on exit
        anyaccel.reset_accelerator()
        try:
            with warnings.catch_warnings():  # Lightning's own advice (workers, loggers...)
                warnings.simplefilter("ignore")
                return train_all(devices=1, package=package)
        finally:
            anyaccel.reset_accelerator()


@pytest.fixture(scope="module")
def ddp(children: dict[str, _Child], package: str) -> list[dict[str, Any]]:
    return [rank[package] for rank in _ranks(children["ddp"], 2)]


@pytest.fixture(scope="module")
def standalone_only(children: dict[str, _Child]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(children["standalone"].wait().strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def simulated(children: dict[str, _Child]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(children["simulated"].wait().strip().splitlines()[-1])
    return result


def test_children_import_the_lightning_this_run_imports(simulated: dict[str, Any]) -> None:
    # a Lightning put first on PYTHONPATH (.ci/run's oldest, a build of main) is the one tested
    import lightning

    assert simulated["lightning"] == [lightning.__version__, lightning.__file__]


# ---------------------------------------------------------------------- training on the CPU
@pytest.mark.parametrize("api", ["trainer", "fabric"])
def test_one_process_fit_equals_lightnings_cpu_accelerator(
    api: str, single: dict[str, Any]
) -> None:
    ours, theirs = single[api]["anyaccel"], single[api]["cpu"]
    assert ours["strategy"] in ("AnySingleDeviceStrategy", "AnyFabricSingleDeviceStrategy")
    assert ours["root_device"] == "cpu" and ours["world_size"] == 1
    assert ours["weights"] == theirs["weights"]


@pytest.mark.parametrize("api", ["trainer", "fabric"])
def test_ddp_fit_under_torchrun_equals_across_ranks_and_lightnings_cpu(
    api: str, ddp: list[dict[str, Any]], single: dict[str, Any]
) -> None:
    ranks = [result[api]["anyaccel"] for result in ddp]
    assert [r["strategy"] for r in ranks] == [
        "AnyDDPStrategy" if api == "trainer" else "AnyFabricDDPStrategy"
    ] * 2
    # anyaccel_shm without naming it (the accelerator's answer), with Lightning's CPU's weights
    assert [(r["backend"], r["world_size"]) for r in ranks] == [("anyaccel_shm", 2)] * 2
    assert ranks[0]["weights"] == ranks[1]["weights"]
    assert ranks[0]["weights"] == ddp[0][api]["cpu"]["weights"] == ddp[1][api]["cpu"]["weights"]
    # Two ranks saw different batches than one process did: the DDP run really synchronised.
    assert ranks[0]["weights"] != single[api]["anyaccel"]["weights"]


@pytest.mark.parametrize("api", ["trainer", "fabric"])
def test_each_package_runs_on_its_own_classes(
    api: str, package: str, single: dict[str, Any], ddp: list[dict[str, Any]]
) -> None:
    # The classes are built on each package's own bases: pickle names them by that package.
    prefix = {"lightning": "LIGHTNING.", "pytorch_lightning": "PYTORCH_LIGHTNING."}[package]
    for run in (single[api]["anyaccel"], ddp[0][api]["anyaccel"], ddp[1][api]["anyaccel"]):
        accelerator, strategy, precision = run["classes"]
        assert (accelerator, strategy) == (prefix + "AnyAccelerator", prefix + run["strategy"])
        assert precision == "Precision"  # 32-true: Lightning's own plugin
    assert not any(name.startswith("PYTORCH_") for name in single[api]["cpu"]["classes"])


def test_the_standalone_packages_alone_fit_as_lightnings_cpu(
    standalone_only: dict[str, Any],
) -> None:
    assert standalone_only["flavours"] == ["pytorch_lightning"]
    assert standalone_only["main_is_standalone"]  # the module's own names are theirs then
    for api in ("trainer", "fabric"):
        ours, theirs = standalone_only["runs"][api]["anyaccel"], standalone_only["runs"][api]["cpu"]
        assert ours["classes"][0] == "PYTORCH_LIGHTNING.AnyAccelerator"
        assert ours["root_device"] == "cpu" and ours["weights"] == theirs["weights"]


def test_sync_dist_logs_int_and_float_metrics_on_anyaccel_shm_as_on_gloo(
    children: dict[str, _Child],
) -> None:
    # mean, sum and max of int64 counts and float losses, in training and validation (which
    # Lightning runs under inference_mode on any backend not named "gloo")
    fast, gloo = _ranks(children["sync_shm"], 2), _ranks(children["sync_gloo"], 2)
    assert [r["backend"] for r in fast] == ["anyaccel_shm"] * 2
    assert [r["backend"] for r in gloo] == ["gloo"] * 2
    names = set(fast[0]["metrics"])
    for stage, kind, fx in itertools.product(("train", "val"), ("int", "float"), FXS):
        assert f"{stage}_{kind}_{fx}_epoch" in names  # validation keeps no _step at the end
        assert stage == "val" or f"{stage}_{kind}_{fx}_step" in names
    for ours, theirs in zip(fast, gloo, strict=True):
        assert ours["metrics"] == theirs["metrics"] == fast[0]["metrics"]
        # the strategy's reduce of an int64 (sync_dist's call): ReduceOp.AVG on anyaccel_shm,
        # Lightning's SUM-then-divide on gloo; both truncate: (1 + 4) / 2 is 2
        assert ours["reduced"] == theirs["reduced"]
        assert ours["reduced"][0] == [2, "torch.int64"]


FXS = ("mean", "sum", "max")


# ---------------------------------------------------------------------- the public helper
@pytest.mark.parametrize("api", ["trainer", "fabric"])
def test_the_public_helper_trains_as_lightnings_cpu_in_one_process_and_ddp(
    api: str, single: dict[str, Any], ddp: list[dict[str, Any]]
) -> None:
    one = single[api]["helper"]
    assert one["strategy"] in ("AnySingleDeviceStrategy", "AnyFabricSingleDeviceStrategy")
    assert one["weights"] == single[api]["cpu"]["weights"]
    ranks = [result[api]["helper"] for result in ddp]
    assert [(r["strategy"].endswith("DDPStrategy"), r["backend"]) for r in ranks] == [
        (True, "anyaccel_shm")
    ] * 2
    assert ranks[0]["weights"] == ranks[1]["weights"] == ddp[0][api]["cpu"]["weights"]


@pytest.fixture(scope="module")
def fallback(children: dict[str, _Child]) -> list[dict[str, Any]]:
    return _ranks(children["fallback"], 2)


def test_changed_private_code_warns_once_and_leaves_lightning_untouched(
    fallback: list[dict[str, Any]],
) -> None:
    for rank in fallback:
        [(category, message)] = rank["warnings"]
        assert category == "LightningHookWarning"
        for words in ("_AcceleratorConnector._check_and_init_precision", "left untouched",
                      "trainer_kwargs(", "fabric_kwargs("):  # fmt: skip
            assert words in message, message
        assert len(rank["again"]) == 2  # register() again: the same two findings, no warning
        assert (rank["installed"], rank["untouched"]) == (False, True)
        assert rank["registered"] == [True, True]  # the public registration still happened
        assert rank["named_strategy"] == "DDPStrategy"  # the name alone: Lightning's choice


def test_a_newer_lightning_release_is_imported_not_refused(
    fallback: list[dict[str, Any]],
) -> None:
    assert fallback[0]["versions"] == {"lightning": "3.0.0", "pytorch_lightning": "3.0.0"}


@pytest.mark.parametrize("package", ["lightning", "pytorch_lightning"])
@pytest.mark.parametrize("api", ["trainer", "fabric"])
def test_without_hooks_the_public_helper_trains_ddp_as_lightnings_cpu(
    api: str, package: str, fallback: list[dict[str, Any]]
) -> None:
    ranks = [rank["runs"][package][api] for rank in fallback]
    prefix = {"lightning": "LIGHTNING.", "pytorch_lightning": "PYTORCH_LIGHTNING."}[package]
    for run in ranks:
        assert run["helper"]["classes"][1].startswith(prefix + "Any")
        assert (run["helper"]["backend"], run["helper"]["world_size"]) == ("anyaccel_shm", 2)
    assert ranks[0]["helper"]["weights"] == ranks[1]["helper"]["weights"]
    assert ranks[0]["helper"]["weights"] == ranks[0]["cpu"]["weights"]


# ---------------------------------------------------------------------- a simulated device
def test_simulated_device_is_selected(simulated: dict[str, Any]) -> None:
    assert simulated["selected"] == "MluAccelerator"


@pytest.mark.parametrize(
    ("run", "strategy", "root"),
    [
        ("trainer_one", "AnySingleDeviceStrategy", "mlu:0"),
        ("trainer_auto", "AnyDDPStrategy", "mlu:0"),
        ("trainer_fp16", "AnySingleDeviceStrategy", "mlu:1"),
        ("trainer_ddp_spawn", "AnyDDPStrategy", "mlu:0"),
        ("fabric_one", "AnyFabricSingleDeviceStrategy", "mlu:0"),
        ("fabric_auto", "AnyFabricDDPStrategy", "mlu:0"),
    ],
)
def test_stock_strategy_choices_land_on_the_simulated_device(
    run: str, strategy: str, root: str, simulated: dict[str, Any]
) -> None:
    assert (simulated[run]["strategy"], simulated[run]["root_device"]) == (strategy, root)
    if "DDP" in strategy:  # Lightning alone would pick gloo for an unknown device type
        assert simulated[run]["backend"] == "cncl"


@pytest.mark.parametrize(
    ("run", "scaler"),
    [("trainer_auto", None), ("trainer_fp16", "mlu"), ("fabric_one", None), ("fabric_auto", "mlu")],
)
def test_mixed_precision_autocasts_and_scales_on_the_simulated_device(
    run: str, scaler: str | None, simulated: dict[str, Any]
) -> None:
    assert simulated[run]["precision"] in ("AnyMixedPrecision", "AnyFabricMixedPrecision")
    assert (simulated[run]["precision_device"], simulated[run]["scaler_device"]) == ("mlu", scaler)


def test_ddp_spawn_keeps_its_start_method(simulated: dict[str, Any]) -> None:
    assert simulated["trainer_ddp_spawn"]["start_method"] == "spawn"


def test_fabric_device_is_the_simulated_device(simulated: dict[str, Any]) -> None:
    assert simulated["fabric_device"] == "mlu:0"


def test_setup_device_makes_the_device_current(simulated: dict[str, Any]) -> None:
    assert simulated["current_after_setup"] == 1


def test_device_stats_are_the_accelerators_memory_figures(simulated: dict[str, Any]) -> None:
    assert simulated["stats"] == {"memory_allocated": 4096, "total_memory": 16 * 1024**3}


def test_ddp_wraps_the_model_on_the_root_devices_default_stream(
    simulated: dict[str, Any],
) -> None:
    # Trainer, Fabric, a Trainer rank on mlu:1: inside torch.mlu.stream(default_stream(index)),
    # as Lightning after 2.6.6 does on CUDA (a side stream left torch's AccumulateGrad warning).
    on_default = ["is_current_stream_capturing", "default_stream", "stream"]
    assert simulated["ddp_wrapped"][:3] == [
        [[0], on_default, 0],
        [[0], on_default, 0],
        [[1], on_default, 1],
    ]


def test_ddp_wraps_the_model_on_a_side_stream_while_a_graph_is_captured(
    simulated: dict[str, Any],
) -> None:
    # torch's DDP notes: whole-network capture needs DDP built on a side stream (no device).
    assert simulated["ddp_wrapped"][3:] == [
        [[0], ["is_current_stream_capturing", "Stream", "stream"], None]
    ]
    # The stream mismatch is then meant: torch's warning about it is off (torch 2.10+ has it).
    has_warning = hasattr(torch.autograd.graph, "set_warn_on_accumulate_grad_stream_mismatch")
    expected = [True, False] if has_warning else [None, None]
    assert simulated["accumulate_grad_warning"] == expected


def test_a_bound_accelerator_survives_pickling(simulated: dict[str, Any]) -> None:
    assert simulated["bound_copy"] == ["AnyAccelerator[MluAccelerator]", "mlu", 2]


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("cpu_single_device_name", ["rooted on cpu", "'mlu'", "strategy='auto'"]),
        ("cpu_single_device", ["rooted on cpu", "'mlu'", "anyaccel_single_device"]),
        ("stock_ddp", ["DDPStrategy is not adapted", "'mlu'", "anyaccel_ddp"]),
        ("too_many", ["devices=3", "has 2"]),
        ("bad_index", ["devices=[0, 2]", "index 2", "has 2"]),
        ("setup_cpu", ["set up cpu", "'mlu'"]),
        ("unhooked_ddp", ["torch.cuda streams", "'mlu'", "fabric_kwargs(devices=...)"]),
    ],
)
def test_configurations_off_the_simulated_device_are_refused(
    case: str, words: list[str], simulated: dict[str, Any]
) -> None:
    message = simulated["errors"][case]
    assert message.startswith("LightningSetupError: "), message
    for word in words:
        assert word in message, message


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

    monkeypatch.setattr(exit_grace, "install_exit_grace", lambda: calls.append("x") or True)
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


def test_import_anyaccel_loads_no_lightning(simulated: dict[str, Any]) -> None:
    assert simulated["bad_installs"]["loaded"] == []


def test_missing_lightning_names_the_extra(simulated: dict[str, Any]) -> None:
    message = simulated["bad_installs"]["missing"]
    assert message.startswith("LightningUnavailableError: "), message
    assert "pip install -e '.[lightning]'" in message


def test_too_old_lightning_is_refused_and_nothing_is_half_done(
    simulated: dict[str, Any],
) -> None:
    bad = simulated["bad_installs"]
    assert "lightning 2.3.3 is installed" in bad["too_old"], bad["too_old"]
    assert (bad["registered"], bad["hooked"], bad["half_imported"]) == (False, False, False)


def test_missing_lightning_names_both_packages(simulated: dict[str, Any]) -> None:
    message = simulated["bad_installs"]["missing"]
    assert "`lightning` package" in message and "`pytorch_lightning`" in message, message


def test_pytorch_lightning_without_lightning_fabric_is_refused(simulated: dict[str, Any]) -> None:
    message = simulated["bad_installs"]["no_fabric"]
    assert message.startswith("LightningUnavailableError: "), message
    assert "lightning_fabric, which it needs, is not" in message
    assert f'"lightning_fabric{SUPPORTED}"' in message  # the fix, with the range


def test_unsupported_standalone_packages_are_refused(simulated: dict[str, Any]) -> None:
    message = simulated["bad_installs"]["standalone_too_old"]
    assert message.startswith("LightningUnavailableError: "), message
    assert "pytorch_lightning 2.3.3 is installed" in message
    assert f"supports pytorch_lightning{SUPPORTED}" in message


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
