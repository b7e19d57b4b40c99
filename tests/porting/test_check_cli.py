"""``anyaccel check`` as a user and pre-commit run it: real subprocesses, real files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_check(
    *args: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(
        [sys.executable, "-m", "anyaccel", "check", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def _project(tmp_path: Path, pyproject: str = "") -> Path:
    (tmp_path / "pyproject.toml").write_text(pyproject)
    (tmp_path / "train.py").write_text("import torch\nx = torch.zeros(1).cuda()\n")
    (tmp_path / "clean.py").write_text("import torch\nx = torch.zeros(1)\n")
    return tmp_path


def test_findings_print_as_file_line_col_and_exit_1(tmp_path: Path) -> None:
    project = _project(tmp_path)
    result = run_check(".", cwd=project)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "train.py:2:5: ACC030 `.cuda()` moves to a CUDA device only "
        "(.to(get_accelerator().current_device_name()))"
    ]
    assert "1 finding(s)" in result.stderr


def test_check_and_port_never_import_torch(tmp_path: Path) -> None:
    # A linter in a pre-commit hook must start fast: torch's import alone takes seconds.
    project = _project(tmp_path)
    code = (
        "import sys\n"
        "from anyaccel.cli import main\n"
        f"main(['check', {str(project)!r}]); main(['port', {str(project)!r}])\n"
        "print('torch imported' if 'torch' in sys.modules else 'no torch')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == "no torch", result.stdout


def test_clean_code_exits_0(tmp_path: Path) -> None:
    project = _project(tmp_path)
    result = run_check("clean.py", cwd=project)
    assert (result.returncode, result.stdout) == (0, "")


def test_json_format_is_a_list_of_findings(tmp_path: Path) -> None:
    result = run_check("--format", "json", str(_project(tmp_path)))
    (finding,) = json.loads(result.stdout)
    assert finding["code"] == "ACC030" and finding["line"] == 2 and finding["column"] == 5


def test_github_format_is_workflow_annotations(tmp_path: Path) -> None:
    result = run_check("--format", "github", "train.py", cwd=_project(tmp_path))
    assert re.fullmatch(
        r"::error file=train\.py,line=2,col=5,title=anyaccel ACC030::.+\n", result.stdout
    )


def test_pyproject_settings_apply(tmp_path: Path) -> None:
    project = _project(tmp_path, '[tool.anyaccel]\nignore = ["ACC030"]\n')
    assert run_check(".", cwd=project).returncode == 0
    project_excluding = _project(tmp_path, '[tool.anyaccel]\nexclude = ["train.py"]\n')
    assert run_check(".", cwd=project_excluding).returncode == 0


def test_command_line_select_and_exclude(tmp_path: Path) -> None:
    project = _project(tmp_path)
    assert run_check("--select", "ACC04", ".", cwd=project).returncode == 0
    assert run_check("--exclude", "train*", ".", cwd=project).returncode == 0


def test_bad_config_exits_2_with_the_reason(tmp_path: Path) -> None:
    project = _project(tmp_path, '[tool.anyaccel]\nselect = ["NOPE"]\n')
    result = run_check(".", cwd=project)
    assert result.returncode == 2
    assert "unknown rule code 'NOPE'" in result.stderr and "Traceback" not in result.stderr


def test_unparsable_and_missing_files_exit_2_without_traceback(tmp_path: Path) -> None:
    project = _project(tmp_path)
    (project / "broken.py").write_text("def f(:\n  torch.cuda.synchronize()\n")
    (project / "binary.py").write_bytes(b"\xff\xfe cuda \x00")
    result = run_check(".", cwd=project)
    assert result.returncode == 2
    assert "broken.py:1:7: cannot parse" in result.stderr
    assert "binary.py: cannot read" in result.stderr
    assert "train.py:2:5: ACC030" in result.stdout  # the good files are still reported
    missing = run_check("no_such_dir", cwd=project)
    assert missing.returncode == 2 and "no_such_dir: no such file" in missing.stderr
    assert "Traceback" not in result.stderr + missing.stderr


def test_many_files_are_checked_in_parallel_with_the_same_result(tmp_path: Path) -> None:
    for i in range(230):  # over the parallel threshold
        (tmp_path / f"m{i:03}.py").write_text("import torch\n" + "\n" * (i % 3) + "x.cuda()\n")
    result = run_check("--format", "json", str(tmp_path))
    findings = json.loads(result.stdout)
    assert len(findings) == 230
    assert [f["line"] for f in findings[:4]] == [2, 3, 4, 2]


def test_pre_commit_hook_runs_the_check_command() -> None:
    text = (REPO / ".pre-commit-hooks.yaml").read_text()
    assert re.search(r"^- id: anyaccel-check$", text, re.M)
    assert re.search(r"^  entry: anyaccel check$", text, re.M)
    assert re.search(r"^  types: \[python\]$", text, re.M)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_named_pipe_is_refused_at_once_not_waited_on(tmp_path: Path) -> None:
    project = _project(tmp_path)
    os.mkfifo(project / "pipe.py")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    command = [sys.executable, "-m", "anyaccel", "check"]
    # Reading a FIFO blocks until a writer opens it: the old code hung here.
    named = subprocess.run(
        [*command, str(project / "pipe.py")], capture_output=True, text=True, env=env, timeout=60
    )
    assert named.returncode == 2
    assert named.stderr.strip().splitlines() == [
        f"anyaccel check: {project / 'pipe.py'}: not a regular file (a named pipe); skipped, "
        "never opened: name a Python source file or a directory"
    ]
    walked = subprocess.run(
        [*command, str(project)], capture_output=True, text=True, env=env, timeout=60
    )
    assert walked.returncode == 2 and "train.py" in walked.stdout
    assert f"{project / 'pipe.py'}: not a regular file (a named pipe)" in walked.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc")
def test_links_to_endless_or_special_files_are_refused_without_opening(tmp_path: Path) -> None:
    # /proc/kmsg (readable by root) never ends: reading it waited for the next kernel message.
    endless = Path("/proc/kmsg") if os.access("/proc/kmsg", os.R_OK) else Path("/proc/self/status")
    (tmp_path / "tree" / "data").mkdir(parents=True)
    project = _project(tmp_path / "tree")
    os.mkfifo(tmp_path / "tree" / "data" / "pipe")
    os.mkfifo(tmp_path / "outside-pipe")
    (project / "kernel.py").symlink_to(endless)
    (project / "inner_pipe.py").symlink_to("data/pipe")
    (project / "outer_pipe.py").symlink_to("../outside-pipe")
    result = run_check(str(project), timeout=60)
    assert result.returncode == 2 and "train.py" in result.stdout
    real = project.resolve()
    refused = [line for line in result.stderr.splitlines() if "finding(s)" not in line]
    assert refused == [
        f"anyaccel check: {project / 'inner_pipe.py'}: not a regular file (a named pipe behind "
        f"the symbolic link to {real / 'data' / 'pipe'}); skipped, never opened: name a Python "
        "source file or a directory",
        f"anyaccel check: {project / 'kernel.py'}: skipped, not read and not written: a "
        f"symbolic link to {endless.resolve()}, outside {real} (the tree given); check or port "
        "that file where it lives, or --exclude the link",
        f"anyaccel check: {project / 'outer_pipe.py'}: skipped, not read and not written: a "
        f"symbolic link to {tmp_path.resolve() / 'outside-pipe'}, outside {real} (the tree "
        "given); check or port that file where it lives, or --exclude the link",
    ]
    named = run_check(str(endless), str(project / "kernel.py"), timeout=60)
    assert named.returncode == 2
    assert named.stderr.splitlines() == [
        f"anyaccel check: {endless}: a kernel pseudo-file under /proc (it may never end); "
        "skipped, never opened: name a Python source file",
        f"anyaccel check: {project / 'kernel.py'}: a kernel pseudo-file under /proc behind the "
        f"symbolic link to {endless.resolve()} (it may never end); skipped, never opened: name "
        "a Python source file",
    ]
