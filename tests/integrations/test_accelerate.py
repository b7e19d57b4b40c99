"""HF accelerate and the transformers Trainer run on anyaccel's device after ``install()``.

The multi-process checks are real ``torchrun --nproc-per-node 2`` jobs on the CPU backend
(gloo), started together and asserted from each rank's own output: accelerate's shipped test
scripts, and a transformers ``Trainer`` on a tiny GPT-2 built from a config. A device neither
framework knows is a simulated Biren ``supa`` (PrivateUse1), in a fresh process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "accelerate", reason="accelerate is not installed (pip install 'anyaccel[accelerate]')"
)


from anyaccel.integrations import accelerate as integration

from .conftest import ANYACCEL_SRC

HERE = Path(__file__).parent
CHILD = HERE / "accelerate_child.py"
SIMULATED = HERE / "accelerate_simulated.py"
KNOWN_DEVICES = HERE / "accelerate_known_devices.py"
TIMEOUT = 300  # generous: a loaded 2-core box; each job takes well under a minute
_HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
_NO_TRANSFORMERS = "transformers is not installed (pip install 'anyaccel[transformers]')"
#: A started subprocess and its folder, by name.
Jobs = dict[str, tuple[subprocess.Popen[str], Path]]


def _env(**extra: str) -> dict[str, str]:
    """This process's environment without the variables under test, plus ``extra``."""
    env = {**os.environ, "PYTHONPATH": ANYACCEL_SRC, "OMP_NUM_THREADS": "1"}
    for name in ("DS_ACCELERATOR", "ACCELERATE_USE_CPU", "ACCELERATE_TORCH_DEVICE", "LOCAL_RANK"):
        env.pop(name, None)
    return {**env, **extra}


def _finish(process: subprocess.Popen[str], what: str) -> str:
    try:
        output, _ = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"{what} timed out after {TIMEOUT} s:\n{output[-4000:]}")
    assert process.returncode == 0, f"{what}: exit {process.returncode}\n{output[-4000:]}"
    return output


def _simulated_env(host: str) -> dict[str, str]:
    """A child environment whose processes (and theirs) all see the simulated ``host``."""
    site = str(HERE / "simulated_site")
    return _env(PYTHONPATH=os.pathsep.join((site, ANYACCEL_SRC)), ANYACCEL_TEST_SIMULATE=host)


_REPORT = """
import warnings
warnings.simplefilter("ignore")
from anyaccel.cli import main
main(["report", "--json"])
print("=" * 20, "text")
main(["report"])
"""


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobs]:
    """Every subprocess this module checks, all started at once so that they overlap."""
    # --standalone: torchrun picks a free port for each job itself
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    cpu = _env(DS_ACCELERATOR="cpu")
    commands: dict[str, tuple[list[str], dict[str, str]]] = {
        "ops": ([*torchrun, str(CHILD), "ops"], cpu),
        # the documented way to keep gloo under install()
        "script": ([*torchrun, str(CHILD), "script"], {**cpu, "ANYACCEL_SHM_BACKEND": "0"}),
        "report": (
            [sys.executable, "-c", _REPORT],
            _env(DS_ACCELERATOR="cpu", LOCAL_RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2"),
        ),
    }
    by_import = str(HERE / "accelerate_device_by_import.py")
    for mode in ("import_only", "emulated"):
        commands[f"by_import_{mode}"] = ([sys.executable, by_import, mode], _env())
    if _HAS_TRANSFORMERS:
        trainer = [*torchrun, str(CHILD), "trainer"]
        commands["trainer"] = (trainer, cpu)
        commands["simulated"] = ([sys.executable, str(SIMULATED)], _simulated_env("supa"))
        for host in ("mps", "cuda-xpu"):
            commands[f"known_devices_{host}"] = (
                [sys.executable, str(KNOWN_DEVICES)],
                _simulated_env(host),
            )
        bf16 = Path(__file__).with_name("trainer_bf16_child.py")
        commands["bf16"] = ([sys.executable, str(bf16)], _env(DS_ACCELERATOR="cpu"))
    started: Jobs = {}
    for name, (command, env) in commands.items():
        out_dir = tmp_path_factory.mktemp(f"accelerate_{name}")
        if command[-1] in ("ops", "script", "trainer"):
            command = [*command, str(out_dir)]
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        started[name] = (process, out_dir)
    yield started
    for process, _ in started.values():
        if process.poll() is None:
            process.kill()
            process.communicate()


_outputs: dict[str, str] = {}


def _output(jobs: Jobs, name: str) -> str:
    """What the job printed, once it ended successfully."""
    if name not in jobs:
        pytest.skip(_NO_TRANSFORMERS)
    if name not in _outputs:
        _outputs[name] = _finish(jobs[name][0], f"the {name} job")
    return _outputs[name]


def _last_json(jobs: Jobs, name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(_output(jobs, name).strip().splitlines()[-1])
    return result


def _ranks(jobs: Jobs, name: str) -> list[tuple[str, dict[str, Any]]]:
    """Each rank's own output and its result line, in rank order."""
    _output(jobs, name)
    ranks = []
    for rank in (0, 1):
        output = (jobs[name][1] / f"rank{rank}.log").read_text()
        results = [line for line in output.splitlines() if line.startswith("RESULT ")]
        assert len(results) == 1, f"rank {rank} printed no result:\n{output[-4000:]}"
        ranks.append((output, json.loads(results[0].removeprefix("RESULT "))))
    return ranks


def _assert_two_multi_cpu_ranks(states: list[dict[str, Any]], group_backend: str) -> None:
    assert [state["process_index"] for state in states] == [0, 1]
    for state in states:
        assert state["distributed_type"] == "MULTI_CPU", state
        assert state["num_processes"] == 2, state
        # accelerate names gloo for MULTI_CPU; the group is the one install() joined
        assert (state["backend"], state["group_backend"]) == ("gloo", group_backend), state


def _installed_group(results: list[dict[str, Any]], group_backend: str) -> None:
    for result in results:
        assert result["installed_process_group"] == group_backend, result


@pytest.mark.slow
def test_accelerates_test_ops_pass_on_two_multi_cpu_ranks(jobs: Jobs) -> None:
    ranks = _ranks(jobs, "ops")
    # install() alone: accelerate's gather/reduce ran on anyaccel_shm, with gloo's results
    _assert_two_multi_cpu_ranks([result["ops"] for _, result in ranks], "anyaccel_shm")
    _installed_group([result for _, result in ranks], "anyaccel_shm")
    for output, result in ranks:
        # the script's first line, a bare PartialState() after install(): both ranks, not NO
        assert "=== first state: MULTI_CPU, 2" in output
        assert "=== ops passed" in output
        assert result["installed_distributed_type"] == "MULTI_CPU"
    main_output = ranks[0][0]  # test_ops prints its progress on the main process only
    assert "testing gather" in main_output and "testing reduce_sum" in main_output


@pytest.mark.slow
def test_accelerates_test_script_passes_on_two_multi_cpu_ranks(jobs: Jobs) -> None:
    ranks = _ranks(jobs, "script")
    # ANYACCEL_SHM_BACKEND=0: install() joins a gloo group
    _assert_two_multi_cpu_ranks([result["script"] for _, result in ranks], "gloo")
    _installed_group([result for _, result in ranks], "gloo")
    for rank, (output, result) in enumerate(ranks):
        assert "=== script passed" in output
        assert result["installed_distributed_type"] == "MULTI_CPU"
        # the script prints its AcceleratorState on every rank
        assert (
            "Distributed environment: DistributedType.MULTI_CPU  Backend: gloo\n"
            f"Num processes: 2\nProcess index: {rank}\n"
        ) in output
    assert "**Training integration test**" in ranks[0][0]


@pytest.mark.slow
@pytest.mark.skipif(not _HAS_TRANSFORMERS, reason=_NO_TRANSFORMERS)
def test_trainer_trains_one_model_on_two_ranks(jobs: Jobs) -> None:
    ranks = _ranks(jobs, "trainer")
    results = [result for _, result in ranks]
    _assert_two_multi_cpu_ranks(results, "anyaccel_shm")
    _installed_group(results, "anyaccel_shm")
    for result in results:
        assert result["installed_distributed_type"] == "MULTI_CPU", result
        assert result["world_size"] == 2, result
        assert result["parallel_mode"] == "ParallelMode.DISTRIBUTED", result
        assert result["batches_per_epoch"] == 4, result  # 32 samples, batch 4, over 2 ranks
    assert results[0]["training_loss"] == results[1]["training_loss"]
    assert results[0]["weights_checksum"] == results[1]["weights_checksum"]


@pytest.mark.slow
def test_the_trainer_trains_in_bf16_on_the_cpu_with_the_line_explain_gives(jobs: Jobs) -> None:
    """transformers refuses bf16=True alone on a CPU host; the line trainer_bf16() names works."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: transformers takes bf16=True alone here")
    result = _last_json(jobs, "bf16")
    assert "Your setup doesn't support bf16/gpu" in result["answer"], result
    assert result["keywords"] == ["bf16", "use_cpu"], result
    assert result["device"] == "cpu" and result["mixed_precision"] == "bf16", result
    assert result["training_loss"] == result["training_loss"]  # trained, not NaN


@pytest.mark.slow
@pytest.mark.skipif(not _HAS_TRANSFORMERS, reason=_NO_TRANSFORMERS)
def test_trainer_bf16_never_names_use_cpu_for_a_device_that_is_not_the_cpu() -> None:
    """On an SDAA (transformers refuses bf16=True there too), use_cpu=True would leave the SDAA."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: transformers takes bf16=True alone here")
    answer = integration.trainer_bf16(device_type="sdaa")  # the child answers as the CPU host
    assert "Your setup doesn't support bf16/gpu" in answer, answer
    assert "use_cpu=True would train on the CPU instead of 'sdaa': use bf16=False" in answer
    assert "use that line" not in answer


# ---------------------------------------------------------------------- a device neither knows
@pytest.fixture
def simulated(jobs: Jobs) -> dict[str, Any]:
    """The simulated-supa scenarios (a fresh process)."""
    return _last_json(jobs, "simulated")


@pytest.mark.slow
def test_training_arguments_device_is_the_simulated_device_after_install(
    simulated: dict[str, Any],
) -> None:
    assert simulated["stock_training_arguments_device"] == "cpu"  # the gap install() closes
    assert simulated["installation"] == {
        "device": "supa:0",
        "distributed_type": "NO",
        "environment": {"ACCELERATE_TORCH_DEVICE": "supa:0"},
    }
    assert simulated["training_arguments_device"] == "supa:0"
    assert simulated["partial_state_device"] == "supa:0"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["import_only", "emulated"])
def test_a_device_registered_in_this_process_only_is_the_one_accelerate_is_asked_about(
    jobs: Jobs, mode: str
) -> None:
    # import_only: a vendor package imported by the script (no backend autoload), found by the
    # generic backend; emulated: anyaccel.testing.emulated.install(), a call. Neither exists in
    # a fresh child unless install() hands it over: accelerate used to refuse "vpu:0" there.
    result = _last_json(jobs, f"by_import_{mode}")
    backend = "GenericAccelerator" if mode == "import_only" else "EmulatedAccelerator"
    assert result["backend"] == backend
    assert result["installed_device"] == "vpu:0"
    assert result["partial_state_device"] == "vpu:0"
    assert "device='vpu', distributed_type='NO'" in result["after_install"]
    if _HAS_TRANSFORMERS:
        assert result["training_arguments_device"] == "vpu:0"


_UNTOUCHED = {
    "installed": False,
    "torch_device_env": None,
    "use_cpu_env": None,
    "partial_state_patched": False,
}


@pytest.mark.slow
def test_install_after_accelerate_state_exists_is_refused_and_changes_nothing(
    simulated: dict[str, Any],
) -> None:
    refusal = simulated["after_state"]
    assert refusal["error"] == "AccelerateStateConflictError"
    assert "already exists on 'cpu'" in refusal["message"]
    assert "'supa:0'" in refusal["message"] and "before the first" in refusal["message"]
    assert {key: refusal[key] for key in _UNTOUCHED} == _UNTOUCHED


@pytest.mark.slow
def test_multi_process_on_a_device_without_distributed_type_is_refused(
    simulated: dict[str, Any],
) -> None:
    refusal = simulated["multi_process"]
    assert refusal["error"] == "NoDistributedTypeError"
    assert "no distributed type for 'supa'" in refusal["message"]
    assert "MULTI_CPU" in refusal["message"] and "MULTI_NPU" in refusal["message"]
    assert {key: refusal[key] for key in _UNTOUCHED} == _UNTOUCHED


@pytest.mark.slow
def test_explain_shows_both_frameworks_miss_the_device_and_their_limits(
    simulated: dict[str, Any],
) -> None:
    explanation = simulated["explain"]
    assert explanation["anyaccel_device"] == "supa"
    assert explanation["accelerate"]["device"] == "cpu"
    assert explanation["transformers"]["device"] == "cpu"
    assert explanation["after_install"]["device"] == "supa"
    assert explanation["transformers_after_install"]["device"] == "supa"
    limits = explanation["limits"]
    # accelerate 1.15 takes fp16 on a device outside its list and runs it on the CPU
    assert limits["fp16"].startswith("accepted by accelerate on 'cpu'") or limits[
        "fp16"
    ].startswith("refused by accelerate on 'supa'"), limits["fp16"]
    assert "never places weights on 'supa'" in limits['device_map="auto"']


@pytest.mark.slow
def test_install_warns_when_transformers_would_still_pick_another_device(jobs: Jobs) -> None:
    """anyaccel on the CPU of a (simulated) Mac: transformers, asked, still says mps."""
    on_a_mac = _last_json(jobs, "known_devices_mps")
    [shown] = on_a_mac["warnings"]
    assert "will still pick 'mps'" in shown and "TrainingArguments(use_cpu=True)" in shown
    # the warning does not undo the install
    assert on_a_mac["cpu_on_a_mac"]["environment"] == {"ACCELERATE_USE_CPU": "true"}


@pytest.mark.slow
def test_two_processes_on_a_device_accelerate_picks_itself_need_no_lever(jobs: Jobs) -> None:
    assert _last_json(jobs, "known_devices_cuda-xpu")["cuda_two_processes"] == {
        "device": "cuda",
        "distributed_type": "MULTI_GPU",
        "backend": "nccl",
        "environment": {},
    }


@pytest.mark.slow
def test_two_processes_on_a_device_accelerate_passes_over_are_refused(jobs: Jobs) -> None:
    refusal = _last_json(jobs, "known_devices_cuda-xpu")["xpu_two_processes"]
    assert "would run it as DistributedType.MULTI_GPU on 'cuda'" in refusal["error"]
    assert "DS_ACCELERATOR=cuda" in refusal["error"]
    assert refusal["installed"] is False


# ---------------------------------------------------------------------- anyaccel report
@pytest.mark.slow
def test_report_has_an_accelerate_section_in_json_and_text(jobs: Jobs) -> None:
    as_json, _, as_text = _output(jobs, "report").partition("=" * 20 + " text")
    section = json.loads(as_json[as_json.index("{") :])["accelerate"]
    assert section["installed"] is True
    import torch

    alone = "MULTI_GPU" if torch.cuda.is_available() else "NO"  # accelerate without install()
    assert section["accelerate"]["distributed_type"] == alone
    assert section["after_install"]["distributed_type"] == "MULTI_CPU"
    assert "accelerate / transformers" in as_text
    assert "accelerate after install()" in as_text and "MULTI_CPU" in as_text
