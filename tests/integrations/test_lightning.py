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
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ports import free_port

pytest.importorskip(
    "lightning", reason="the Lightning integration needs `pip install anyaccel[lightning]`"
)

import torch

import anyaccel

from .conftest import finish_launch, ours_then_this_runs_path

pytestmark = pytest.mark.slow

SUPPORTED = ">=2.4"  # the range docs/lightning.md states

HERE = Path(__file__).parent
TIMEOUT = 300  # seconds per child run: Lightning's import alone is slow on a loaded box


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
        "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
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
        "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
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


# ---------------------------------------------------------------------- the import's refusals


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
