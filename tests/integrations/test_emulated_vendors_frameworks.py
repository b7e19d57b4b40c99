"""Lightning, Fabric, accelerate and the transformers Trainer train for real on vendor devices.

Each job runs two ranks under ``torchrun`` and ``python -m anyaccel.testing.simulated VENDOR:2``:
the simulated vendor runtime over anyaccel's emulated devices, so tensors really live on
``mlu:0``, collectives run under the vendor's backend name, and anyaccel's own vendor backend
drives them. The vendors vary by path: the Trainer on Cambricon MLUs (cncl), Fabric on Tecorigin
SDAAs (tccl), accelerate and the transformers Trainer on Moore Threads GPUs (mccl). Each is
compared with the same run on the CPU, bit for bit: Lightning's ``"cpu"`` runs in the same ranks
after the vendor's group is destroyed; accelerate's CPU run is the same script without the
simulation. ``bf16-mixed`` is compared bit for bit too: the model uses only ops whose autocast
policy is the same on the CPU's list and on CUDA's (which the emulated device registers for
PrivateUse1): ``linear`` lowers, ``relu`` follows its input, ``mse_loss`` runs in fp32. Every
negative case leaves one tensor on the CPU: it must fail on the vendor and pass on the CPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch

from anyaccel.backends.mlu import MluAccelerator
from anyaccel.backends.musa import MusaAccelerator
from anyaccel.backends.sdaa import SdaaAccelerator
from anyaccel.emulated.state import MINIMUM_TORCH
from anyaccel.ops.jit.toolchain import toolchain_problem

from .conftest import finish_launch, ours_then_this_runs_path

_TORCH = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
_NO_BUILD = toolchain_problem()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        _TORCH < MINIMUM_TORCH,
        reason=f"the emulated device needs torch >= {MINIMUM_TORCH[0]}.{MINIMUM_TORCH[1]}",
    ),
    pytest.mark.skipif(
        _NO_BUILD is not None, reason=f"the emulated device is built here: {_NO_BUILD}"
    ),
]

HERE = Path(__file__).parent
#: Seconds per job: the first run on a machine builds the emulated device and its collectives.
TIMEOUT = 900
CUDA_LIKE_AUTOCAST = "torch.bfloat16"
STRAY = "Expected all tensors to be on the same device"
_HAS = {name: importlib.util.find_spec(name) is not None
        for name in ("lightning", "accelerate", "transformers")}  # fmt: skip


class Vendor(NamedTuple):
    """A vendor a path runs on: its device type, collective backend and anyaccel class."""

    device_type: str
    backend: str
    accelerator: str


def _vendor(backend: type[MluAccelerator | SdaaAccelerator | MusaAccelerator]) -> Vendor:
    """The facts of ``backend``'s data sheet this module checks."""
    return Vendor(backend._name, backend._communication_backend_name, backend.__name__)


MLU, SDAA, MUSA = _vendor(MluAccelerator), _vendor(SdaaAccelerator), _vendor(MusaAccelerator)
#: The Lightning API each job trains with, and its vendor.
LIGHTNING = {"trainer": MLU, "fabric": SDAA}


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": ours_then_this_runs_path(), "OMP_NUM_THREADS": "1"}
    for name in ("DS_ACCELERATOR", "ACCELERATE_USE_CPU", "ACCELERATE_TORCH_DEVICE", "LOCAL_RANK"):
        env.pop(name, None)
    return env


class _Job:
    """Two ranks started now; their rank files read once the job ends (with a timeout)."""

    def __init__(self, name: str, command: list[str], out: Path) -> None:
        self.name, self.out = name, out / name
        self.out.mkdir()
        self.log = out / f"{name}.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [*command, str(self.out)], stdout=log, stderr=subprocess.STDOUT, env=_env()
            )
        self._ranks: list[dict[str, Any]] | None = None

    def ranks(self) -> list[dict[str, Any]]:
        if self._ranks is None:
            output = finish_launch(self.process, self.log, self.name, TIMEOUT)
            files = sorted(self.out.glob("rank*.json"))
            assert len(files) == 2, f"{self.name}: {files}\n{output[-4000:]}"
            self._ranks = [json.loads(path.read_text()) for path in files]
        return self._ranks


def _torchrun(vendor: Vendor | None) -> list[str]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    if vendor is None:
        return command
    return [*command, "-m", "anyaccel.testing.simulated", f"{vendor.device_type}:2"]


@pytest.fixture(scope="module")
def jobs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, _Job]]:
    """Every job the selected tests of this module read, started at once so that they overlap.

    A test's name says its framework (``test_lightning_...``, ``test_accelerate_...``,
    ``test_transformers_...``): ``-k lightning`` starts no accelerate job.
    """
    out = tmp_path_factory.mktemp("emulated_frameworks")
    selected = {
        item.name.split("_")[1]
        for item in request.session.items
        if getattr(item, "module", None) is request.module
    }
    started: dict[str, _Job] = {}
    if _HAS["lightning"] and "lightning" in selected:
        for api, vendor in LIGHTNING.items():
            script = str(HERE / "lightning_emulated.py")
            started[api] = _Job(api, [*_torchrun(vendor), script, api], out)
    if _HAS["accelerate"] and _HAS["transformers"] and selected & {"accelerate", "transformers"}:
        script = str(HERE / "accelerate_emulated.py")
        started["accelerate"] = _Job("accelerate", [*_torchrun(MUSA), script], out)
        started["accelerate_cpu"] = _Job("accelerate_cpu", [*_torchrun(None), script], out)
    yield started
    for job in started.values():
        if job.process.poll() is None:
            job.process.kill()
            job.process.wait()


def _job(jobs: dict[str, _Job], name: str) -> list[dict[str, Any]]:
    if name not in jobs:
        needs = "lightning" if name in LIGHTNING else "accelerate and transformers"
        pytest.skip(f"{needs} not installed (pip install 'anyaccel[{needs.split()[0]}]')")
    return jobs[name].ranks()


def _on(vendor: Vendor, rank: int) -> dict[str, list[str]]:
    """Where a run on ``vendor`` keeps everything: the rank's own device, nothing else."""
    device = f"{vendor.device_type}:{rank}"
    return {"parameters": [device], "optimizer_state": [device], "batch": [device]}


CPU_ONLY = {"parameters": ["cpu"], "optimizer_state": ["cpu"], "batch": ["cpu"]}
PRECISIONS = ("32-true", "bf16-mixed")


# ---------------------------------------------------------------------- Lightning
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("api", sorted(LIGHTNING))
def test_lightning_ddp_on_two_vendor_ranks_equals_lightnings_cpu_bit_for_bit(
    api: str, precision: str, jobs: dict[str, _Job]
) -> None:
    vendor = LIGHTNING[api]
    ranks = _job(jobs, api)
    strategy = {"trainer": "AnyDDPStrategy", "fabric": "AnyFabricDDPStrategy"}[api]
    for rank, result in enumerate(ranks):
        assert result["selected"] == vendor.accelerator
        ours, cpu = result["ddp"][precision]["vendor"], result["ddp"][precision]["cpu"]
        assert (ours["strategy"], ours["root_device"]) == (strategy, f"{vendor.device_type}:{rank}")
        assert (ours["backend"], cpu["backend"]) == (vendor.backend, "gloo")
        assert len(ours["losses"]) == 3
        assert (ours["losses"], ours["weights"]) == (cpu["losses"], cpu["weights"])
    first, second = (result["ddp"][precision]["vendor"] for result in ranks)
    assert first["weights"] == second["weights"]  # the gradients were all-reduced
    assert first["losses"] != second["losses"]  # over different batches


@pytest.mark.parametrize("api", sorted(LIGHTNING))
def test_lightning_ranks_import_the_lightning_this_run_imports(
    api: str, jobs: dict[str, _Job]
) -> None:
    # a Lightning put first on PYTHONPATH (an older release, a build of main) is the one tested
    ranks = _job(jobs, api)  # skips, with the reason, where Lightning is not installed
    import lightning

    for result in ranks:
        assert result["lightning"] == [lightning.__version__, lightning.__file__]


@pytest.mark.parametrize("api", sorted(LIGHTNING))
def test_lightning_one_process_fit_on_the_vendor_equals_lightnings_cpu(
    api: str, jobs: dict[str, _Job]
) -> None:
    vendor = LIGHTNING[api]
    one = _job(jobs, api)[0]["one"]
    for precision in PRECISIONS:
        ours, cpu = one[precision]["vendor"], one[precision]["cpu"]
        assert ours["strategy"].endswith("SingleDeviceStrategy") and ours["backend"] is None
        assert ours["root_device"] == f"{vendor.device_type}:0"
        assert (ours["losses"], ours["weights"]) == (cpu["losses"], cpu["weights"])


@pytest.mark.parametrize("api", sorted(LIGHTNING))
def test_lightning_keeps_every_parameter_optimizer_state_and_batch_on_the_vendor_device(
    api: str, jobs: dict[str, _Job]
) -> None:
    # seen during training (the Trainer moves everything back to the CPU when fit ends)
    vendor = LIGHTNING[api]
    ranks = _job(jobs, api)
    for rank, result in enumerate(ranks):
        runs = [result["ddp"][p] for p in PRECISIONS] + [result["one"][p] for p in PRECISIONS
                                                         if "one" in result]  # fmt: skip
        for run in runs:
            assert run["vendor"]["devices"] == _on(vendor, rank)
            assert run["cpu"]["devices"] == CPU_ONLY


@pytest.mark.parametrize("api", sorted(LIGHTNING))
def test_lightning_bf16_mixed_autocasts_on_the_vendor_device_type(
    api: str, jobs: dict[str, _Job]
) -> None:
    # a linear layer's output is bf16 only where autocast runs for its tensors' device type
    for result in _job(jobs, api):
        for device in ("vendor", "cpu"):
            ddp = result["ddp"]
            assert ddp["bf16-mixed"][device]["output_dtypes"] == [CUDA_LIKE_AUTOCAST]
            assert ddp["32-true"][device]["output_dtypes"] == ["torch.float32"]


@pytest.mark.parametrize("api", sorted(LIGHTNING))
def test_lightning_a_tensor_left_on_the_cpu_fails_on_the_vendor_and_passes_on_the_cpu(
    api: str, jobs: dict[str, _Job]
) -> None:
    # the Trainer: a CPU tensor built in training_step; Fabric: a loader never set up
    negative = _job(jobs, api)[1]["negative"]
    assert STRAY in negative["anyaccel"], negative["anyaccel"]
    assert f"{LIGHTNING[api].device_type}:0 and cpu" in negative["anyaccel"]
    assert negative["cpu"] == "no error"


# ---------------------------------------------------------------------- accelerate, Trainer
def _accelerate(jobs: dict[str, _Job]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each rank's vendor result beside the same rank's CPU result."""
    return list(zip(_job(jobs, "accelerate"), _job(jobs, "accelerate_cpu"), strict=True))


def test_accelerate_picks_its_own_multi_musa_on_the_simulated_runtime(
    jobs: dict[str, _Job],
) -> None:
    for ours, cpu in _accelerate(jobs):
        assert (ours["selected"], ours["installed_distributed_type"]) == (
            MUSA.accelerator,
            "MULTI_MUSA",
        )
        assert (cpu["selected"], cpu["installed_distributed_type"]) == (
            "CpuAccelerator",
            "MULTI_CPU",
        )


@pytest.mark.parametrize("mixed_precision", ["no", "bf16"])
def test_accelerate_loop_on_two_vendor_ranks_equals_the_cpu_run_bit_for_bit(
    mixed_precision: str, jobs: dict[str, _Job]
) -> None:
    pairs = _accelerate(jobs)
    for rank, (ours, cpu) in enumerate(pairs):
        run, reference = ours["accelerate"][mixed_precision], cpu["accelerate"][mixed_precision]
        assert (run["distributed_type"], run["backend"]) == ("MULTI_MUSA", MUSA.backend)
        assert run["device"] == f"{MUSA.device_type}:{rank}"
        assert run["devices"] == _on(MUSA, rank) and reference["devices"] == CPU_ONLY
        dtype = CUDA_LIKE_AUTOCAST if mixed_precision == "bf16" else "torch.float32"
        assert run["output_dtypes"] == reference["output_dtypes"] == [dtype]
        assert len(run["losses"]) == 3
        assert (run["losses"], run["weights"]) == (reference["losses"], reference["weights"])
    first, second = (ours["accelerate"][mixed_precision] for ours, _ in pairs)
    assert first["weights"] == second["weights"] and first["losses"] != second["losses"]


def test_transformers_trainer_on_two_vendor_ranks_equals_the_cpu_run_bit_for_bit(
    jobs: dict[str, _Job],
) -> None:
    for rank, (ours, cpu) in enumerate(_accelerate(jobs)):
        run, reference = ours["trainer"], cpu["trainer"]
        assert (run["distributed_type"], run["backend"]) == ("MULTI_MUSA", MUSA.backend)
        assert run["device"] == f"{MUSA.device_type}:{rank}"
        assert run["devices"] == _on(MUSA, rank) and reference["devices"] == CPU_ONLY
        assert len(run["losses"]) == 3
        assert (run["losses"], run["weights"]) == (reference["losses"], reference["weights"])


@pytest.mark.parametrize("path", ["accelerate", "trainer"])
def test_accelerate_a_tensor_left_on_the_cpu_fails_on_the_vendor_and_passes_on_the_cpu(
    path: str, jobs: dict[str, _Job]
) -> None:
    # accelerate: a loader never prepared (DDP moves the inputs, not the targets); the
    # Trainer: a tensor outside the model's parameters and buffers
    for rank, (ours, cpu) in enumerate(_accelerate(jobs)):
        assert STRAY in ours["negative"][path], ours["negative"][path]
        assert f"{MUSA.device_type}:{rank} and cpu" in ours["negative"][path]
        assert cpu["negative"][path] == "no error"


def test_transformers_trainer_in_bf16_autocasts_on_the_vendor_device_type(
    jobs: dict[str, _Job],
) -> None:
    # GPT-2's softmax, layer_norm and gelu have other autocast policies on the CPU's list than
    # on CUDA's (which the emulated PrivateUse1 device uses), so only the first-order agreement
    # of the losses is compared; the projection (addmm) is lowered on both
    for rank, (ours, cpu) in enumerate(_accelerate(jobs)):
        run, reference = ours["trainer_bf16"], cpu["trainer_bf16"]
        assert (run["distributed_type"], run["backend"]) == ("MULTI_MUSA", MUSA.backend)
        assert run["devices"] == _on(MUSA, rank) and reference["devices"] == CPU_ONLY
        assert run["output_dtypes"] == reference["output_dtypes"] == [CUDA_LIKE_AUTOCAST]
        assert run["losses"] != ours["trainer"]["losses"]  # bf16 changed the arithmetic
        assert run["losses"] == pytest.approx(reference["losses"], rel=1e-3)
