"""The corpus of CUDA-specific scripts: ported, they check clean, parse, run on the CPU, stay put.

And the same on real third-party code: PyTorch's own modules that use ``torch.cuda``, copied
from the installed torch at test time.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from anyaccel.porting.checker import check_source
from anyaccel.porting.codemod import PortError, port_source

CORPUS = Path(__file__).parent / "corpus"
SRC = Path(__file__).resolve().parents[2] / "src"
PORTABLE = sorted([*CORPUS.glob("runnable/*.py"), *CORPUS.glob("library/*.py")])
RUNNABLE = sorted(CORPUS.glob("runnable/*.py"))


@pytest.fixture(scope="module")
def ported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus copied and ported in place."""
    target = tmp_path_factory.mktemp("ported")
    shutil.copytree(CORPUS, target, dirs_exist_ok=True)
    for path in target.rglob("*.py"):
        path.write_text(port_source(path.read_text(), str(path)).ported)
    return target


@pytest.mark.parametrize("path", PORTABLE, ids=lambda p: p.name)
def test_corpus_file_is_cuda_specific_before(path: Path) -> None:
    assert len(check_source(path.read_text())) >= 5


@pytest.mark.parametrize("path", PORTABLE, ids=lambda p: p.name)
def test_ported_file_checks_clean_parses_and_ports_to_itself(path: Path, ported: Path) -> None:
    text = (ported / path.relative_to(CORPUS)).read_text()
    ast.parse(text)
    assert check_source(text) == []
    assert port_source(text).ported == text


@pytest.mark.parametrize("path", RUNNABLE, ids=lambda p: p.name)
def test_ported_script_runs_on_the_cpu_backend(path: Path, ported: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "RANK")}
    env.update(PYTHONPATH=str(SRC), LOCAL_RANK="0", WORLD_SIZE="1")
    result = subprocess.run(
        [sys.executable, str(ported / path.relative_to(CORPUS))],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.rstrip().endswith("OK")


def _run_ported_amp(ported: Path, extra_path: Path | None = None) -> dict[str, str]:
    """The ported DDP + AMP tutorial's report: what autocast ran in, whether the scaler scaled."""
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "RANK")}
    paths = [str(SRC)] if extra_path is None else [str(extra_path), str(SRC)]
    env.update(PYTHONPATH=os.pathsep.join(paths), LOCAL_RANK="0", WORLD_SIZE="1")
    env["DS_ACCELERATOR"] = "cpu"
    result = subprocess.run(
        [sys.executable, str(ported / "runnable" / "ddp_amp.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    return {
        "dtype": next(line for line in lines if line.startswith("autocast ran in")).split()[-1],
        "scaler": next(line for line in lines if line.startswith("scaler enabled")).split()[-1],
    }


def test_the_port_names_each_precision_choice_it_writes() -> None:
    path = CORPUS / "runnable" / "ddp_amp.py"
    result = port_source(path.read_text(), "ddp_amp.py")
    assert [note.split(": ", 1)[0] for note in result.precision] == [
        "ddp_amp.py:31",
        "ddp_amp.py:36",
    ]
    assert "grad_scaler_applies()" in result.precision[0]
    assert "autocast_dtype(torch.float16)" in result.precision[1]


def test_ported_amp_trains_in_the_precision_the_accelerator_supports(ported: Path) -> None:
    import torch

    from anyaccel import autocast_dtype, grad_scaler_applies
    from anyaccel.backends.cpu import CpuAccelerator

    cpu = CpuAccelerator()
    report = _run_ported_amp(ported)
    assert report["dtype"] == str(autocast_dtype(torch.float16, cpu))
    assert report["scaler"] == str(grad_scaler_applies(torch.float16, cpu))


def test_ported_amp_without_fp16_runs_bf16_with_the_scaler_off(
    ported: Path, tmp_path: Path
) -> None:
    """Where float16 is not computed, never a silent bfloat16 with a scaler left on."""
    (tmp_path / "sitecustomize.py").write_text(
        "from anyaccel.backends.cpu import CpuAccelerator\n"
        "CpuAccelerator.is_fp16_supported = lambda self: False\n"
    )
    assert _run_ported_amp(ported, tmp_path) == {"dtype": "torch.bfloat16", "scaler": "False"}


def test_original_scripts_need_cuda_so_the_port_is_what_makes_them_run() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the originals run too")
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    result = subprocess.run(
        [sys.executable, str(CORPUS / "runnable" / "train_classifier.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode != 0


def test_unportable_parts_are_reported_with_their_lines() -> None:
    path = CORPUS / "unportable" / "launcher.py"
    result = port_source(path.read_text(), str(path))
    assert [(f.line, f.code) for f in result.left] == [
        (13, "ACC042"),
        (20, "ACC002"),
        (25, "ACC030"),
    ]
    assert not result.changed  # nothing here is safe to rewrite


def _torch_files_using_cuda(limit: int = 12) -> list[Path]:
    """A deterministic spread of the installed torch's modules (under 30 kB) using torch.cuda."""
    import torch

    root = Path(torch.__file__).parent
    found = sorted(
        p
        for p in root.rglob("*.py")
        if p.stat().st_size < 30_000
        and "torch.cuda." in p.read_text(encoding="utf-8", errors="replace")
    )
    step = max(1, len(found) // limit)
    return found[::step][:limit]


@pytest.mark.slow
def test_real_torch_modules_port_to_parsable_idempotent_code(tmp_path: Path) -> None:
    files = _torch_files_using_cuda()
    assert len(files) >= 5
    ported_any = 0
    for original in files:
        copy = tmp_path / original.name
        shutil.copyfile(original, copy)
        source = copy.read_text(encoding="utf-8")
        try:
            result = port_source(source, str(copy))
        except PortError as error:  # syntax newer than this libcst: refused, never mangled
            assert "libcst cannot parse" in str(error)
            continue
        ast.parse(result.ported)
        again = port_source(result.ported, str(copy))
        assert again.ported == result.ported, original
        assert len(check_source(result.ported)) == len(result.left), original
        ported_any += result.changed
    assert ported_any >= len(files) // 2
