"""The Python blocks of README.md and docs/*.md run as printed, and the docs build refuses gaps.

A block is marked on the line before its fence: ``<!-- runnable -->`` runs on the CPU in this
test (the page's runnable blocks in order, in one namespace, as a reader would paste them);
``<!-- not runnable: why -->`` says what it needs instead (hardware, a launcher, a model).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from anyaccel.detection import detect_accelerator
from anyaccel.distributed import LAUNCHERS
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = "<!-- runnable -->"
NOT_RUNNABLE = re.compile(r"<!-- not runnable: \S.* -->")
#: Launcher variables a test runner may have inherited: the snippets run as one plain process.
LAUNCHER_VARIABLES = {name for names in LAUNCHERS for name in names[1:]} | {"LOCAL_SIZE"}


@dataclass(frozen=True)
class Block:
    """One fenced Python block: where it is, how it is marked, and its code."""

    page: Path
    line: int
    marker: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def python_blocks(page: Path) -> list[Block]:
    """Every ```python block of ``page`` with the marker line before it ('' when none)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        if lines[index].strip() == "```python":
            end = next(j for j in range(index + 1, len(lines)) if lines[j].strip() == "```")
            marker = lines[index - 1].strip() if index else ""
            blocks.append(Block(page, index + 1, marker, "\n".join(lines[index + 1 : end])))
            index = end
        index += 1
    return blocks


ALL_BLOCKS = [block for page in PAGES for block in python_blocks(page)]

# Runs each page's runnable blocks in one namespace, a fresh one per page; prints a JSON line.
DRIVER = """
import json, sys, traceback
import anyaccel
pages = json.loads(sys.stdin.read())
for page, blocks in pages.items():
    namespace = {"__name__": "__main__"}
    anyaccel.reset_accelerator()
    for where, code in blocks:
        try:
            exec(compile(code, where, "exec"), namespace)
        except BaseException:
            print(json.dumps({"failed": where, "error": traceback.format_exc()}), flush=True)
            sys.exit(1)
        print(json.dumps({"ran": where}), flush=True)
"""


def plain_process_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a user's plain ``python script.py``: CPU forced, no launcher."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env["DS_ACCELERATOR"] = "cpu"
    env["HOME"] = str(tmp_path)  # a snippet writing under ~ writes here
    return env


def test_every_python_block_says_whether_it_runs() -> None:
    unmarked = [
        b.where for b in ALL_BLOCKS if b.marker != RUNNABLE and not NOT_RUNNABLE.fullmatch(b.marker)
    ]
    assert not unmarked, (
        f"Python blocks without a marker: {', '.join(unmarked)}. Put '{RUNNABLE}' on the line "
        "before the fence (the block then runs in tests/test_docs.py), or "
        "'<!-- not runnable: <what it needs> -->'."
    )


def test_the_pages_newcomers_copy_from_are_runnable() -> None:
    runnable = {b.page.name for b in ALL_BLOCKS if b.marker == RUNNABLE}
    assert {"README.md", "index.md", "distributed.md"} <= runnable


def test_runnable_blocks_run_on_the_cpu(tmp_path: Path) -> None:
    pages: dict[str, list[tuple[str, str]]] = {}
    for block in ALL_BLOCKS:
        if block.marker == RUNNABLE:
            pages.setdefault(block.where.split(":")[0], []).append((block.where, block.code))
    result = subprocess.run(
        [sys.executable, "-c", DRIVER],
        input=json.dumps(pages),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=plain_process_env(tmp_path),
    )
    records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    failed = [r for r in records if "failed" in r]
    assert not failed, f"{failed[0]['failed']} raised:\n{failed[0]['error']}"
    assert result.returncode == 0, result.stderr[-3000:]
    ran = {r["ran"] for r in records}
    assert ran == {where for blocks in pages.values() for where, _ in blocks}


def first_script(page: Path) -> str:
    """The first runnable block of ``page``: the whole script the page walks through."""
    return next(b.code for b in python_blocks(page) if b.marker == RUNNABLE)


def test_the_getting_started_script_runs_alone_and_under_torchrun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "train.py"
    script.write_text(first_script(ROOT / "docs" / "index.md"))
    assert first_script(ROOT / "README.md") == script.read_text()  # one story in both places
    env = plain_process_env(tmp_path)
    alone = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=240, cwd=tmp_path, env=env)  # fmt: skip
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert re.search(r"^rank 0/1 on cpu: loss \d", alone.stdout, re.MULTILINE), alone.stdout
    assert "peak process resident memory" in alone.stdout
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    fell_back = detect_accelerator()[1].accelerator == "cpu"  # probes only: no device touched
    if fell_back:  # detected, as a newcomer runs it: the CPU fallback warns, once per job
        del env["DS_ACCELERATOR"]
    launched = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(script)],
        capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stdout[-2000:] + launched.stderr[-3000:]
    ranks = re.findall(r"rank (\d)/2 on (\w+)", launched.stdout)  # two writers: lines may mix
    assert sorted(rank for rank, _ in ranks) == ["0", "1"], launched.stdout
    assert launched.stderr.count("CpuFallbackWarning") == int(fell_back), launched.stderr[-3000:]


# ------------------------------------------------------------------ docs/hooks.py
def build_docs(site: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of the copy of the repository's docs at ``site``."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "--site-dir",
         str(tmp_path / f"{site.name}-html")],
        capture_output=True, text=True, timeout=240, cwd=site,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip


def copy_of_the_docs(destination: Path) -> Path:
    """mkdocs.yml, docs/ and what the pages include (src/ for the API, examples/...)."""
    destination.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", destination)
    for name in ("docs", "src", "examples", "benchmarks", "tools"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, destination / name, ignore=shutil.ignore_patterns(
                "__pycache__", "*.so", "site"))  # fmt: skip
    for name in ("README.md", "CHANGELOG.md"):
        shutil.copy(ROOT / name, destination)
    return destination


@pytest.mark.extras
def test_a_nav_page_missing_fails_the_strict_docs_build(tmp_path: Path) -> None:
    for module in ("mkdocs", "material", "mkdocstrings"):
        pytest.importorskip(module)
    broken = copy_of_the_docs(tmp_path / "broken")
    (broken / "docs" / "faq.md").unlink()
    failed = build_docs(broken, tmp_path)
    assert failed.returncode != 0
    assert "faq.md" in failed.stdout + failed.stderr
    intact = build_docs(copy_of_the_docs(tmp_path / "intact"), tmp_path)
    assert intact.returncode == 0, intact.stdout[-3000:] + intact.stderr[-3000:]


def _fenced(page: Path, language: str) -> list[str]:
    """The bodies of ``page``'s fenced blocks in ``language``, in order."""
    found = re.findall(rf"^```{language}\n(.*?)^```$", page.read_text(), re.M | re.S)
    return [str(body) for body in found]


@pytest.mark.extras
def test_the_readme_ci_recipe_is_a_valid_github_actions_job(tmp_path: Path) -> None:
    # The job a newcomer pastes under `jobs:` of a workflow: valid against GitHub's schema,
    # pre-building the native parts and running pytest on the emulated device.
    (job,) = _fenced(ROOT / "README.md", "yaml")
    assert "anyaccel ops --build all" in job and "--anyaccel-emulated=" in job
    assert "TORCH_EXTENSIONS_DIR" in job and "actions/cache" in job
    if not _has_module("check_jsonschema"):  # run as this interpreter's module, below
        pytest.skip("check-jsonschema is not installed (the dev extra has it)")
    workflow = tmp_path / "recipe.yml"
    workflow.write_text("name: recipe\non: [push]\njobs:\n" + job)
    result = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
         str(workflow)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_the_readme_device_bug_commands_name_real_scripts_and_their_error() -> None:
    # The README's failing example and its fixed twin are scripts of examples/device_bugs,
    # and the error it promises is the one the buggy script declares (and its test checks).
    text = "\n".join(_fenced(ROOT / "README.md", "bash"))
    scripts = re.findall(r"python (examples/device_bugs/\S+\.py)", text)
    assert "examples/device_bugs/batch_not_moved.py" in scripts
    assert "examples/device_bugs/batch_not_moved_fixed.py" in scripts
    for script in scripts:
        assert (ROOT / script).is_file(), script
    buggy = (ROOT / "examples/device_bugs/batch_not_moved.py").read_text()
    expected = re.search(r'EXPECTED_ERROR = "(.*)"', buggy)
    assert expected is not None and expected.group(1) in text
    assert "--anyaccel-emulated=npu:2" in text and "ANYACCEL_EMULATED=npu:2" in text
