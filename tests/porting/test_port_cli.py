"""``anyaccel port`` as a user runs it: diff by default, --write, exit codes, missing libcst."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
SCRIPT = "import torch\nx = torch.zeros(1).cuda()\n"


def run_port(
    *args: str, cwd: Path, python_args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *python_args, "-m", "anyaccel", "port", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=180,
    )


def test_default_prints_a_diff_and_leaves_the_file(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    result = run_port("train.py", cwd=tmp_path)
    assert result.returncode == 1
    assert "--- a/train.py" in result.stdout
    assert "+x = torch.zeros(1).to(get_accelerator().current_device_name())" in result.stdout
    assert (tmp_path / "train.py").read_text() == SCRIPT
    assert "would port 1 of 1 file(s)" in result.stderr


def test_write_ports_in_place_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    first = run_port("--write", ".", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    ported = (tmp_path / "train.py").read_text()
    assert "from anyaccel import get_accelerator" in ported
    second = run_port(".", cwd=tmp_path)
    assert (second.returncode, second.stdout) == (0, "")
    assert (tmp_path / "train.py").read_text() == ported


def test_what_is_left_is_listed_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("import torch\n\nx = y.cuda(dev)\n")
    result = run_port("--write", "m.py", cwd=tmp_path)
    assert result.returncode == 1
    assert "left for you: m.py:3:5: ACC030" in result.stderr


def test_unparsable_file_is_an_error_and_not_touched(tmp_path: Path) -> None:
    broken = "def f(:\n    torch.cuda.synchronize()\n"
    (tmp_path / "bad.py").write_text(broken)
    result = run_port("--write", ".", cwd=tmp_path)
    assert result.returncode == 2
    assert "bad.py:1:7: cannot parse" in result.stderr and "Traceback" not in result.stderr
    assert (tmp_path / "bad.py").read_text() == broken


def _tree_with_a_link_out(tmp_path: Path) -> tuple[Path, Path]:
    """tree/own.py, and tree/pkg/link.py -> ../../outside/victim.py (both need porting)."""
    (tmp_path / "tree" / "pkg").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    victim = tmp_path / "outside" / "victim.py"
    victim.write_text(SCRIPT)
    (tmp_path / "tree" / "own.py").write_text(SCRIPT)
    (tmp_path / "tree" / "pkg" / "link.py").symlink_to("../../outside/victim.py")
    return tmp_path / "tree", victim


def test_write_leaves_a_file_reached_through_a_link_out_of_the_tree_alone(tmp_path: Path) -> None:
    tree, victim = _tree_with_a_link_out(tmp_path)
    result = run_port("--write", "tree/", cwd=tmp_path)
    assert result.returncode == 2
    assert victim.read_text() == SCRIPT  # the old code rewrote it, exit 0, no word
    assert "get_accelerator" in (tree / "own.py").read_text()
    assert (
        f"anyaccel port: tree/pkg/link.py: skipped, not read and not written: a symbolic link "
        f"to {victim.resolve()}, outside {tree.resolve()} (the tree given)"
    ) in result.stderr
    assert "ported 1 of 1 file(s)" in result.stderr


def test_a_link_out_of_the_tree_named_explicitly_is_ported_where_it_points(tmp_path: Path) -> None:
    tree, victim = _tree_with_a_link_out(tmp_path)
    result = run_port("--write", "tree/pkg/link.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "get_accelerator" in victim.read_text()
    assert (tree / "pkg" / "link.py").is_symlink()


def test_a_directory_link_out_of_the_tree_is_not_followed(tmp_path: Path) -> None:
    tree, victim = _tree_with_a_link_out(tmp_path)
    (tree / "pkg" / "link.py").unlink()
    (tree / "ext").symlink_to("../outside", target_is_directory=True)
    result = run_port("--write", "tree", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert victim.read_text() == SCRIPT and "ported 1 of 1 file(s)" in result.stderr


def test_a_file_reached_twice_through_a_link_in_the_tree_is_ported_once(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(SCRIPT)
    (tmp_path / "b.py").symlink_to("a.py")
    result = run_port("--write", ".", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "ported 1 of 1 file(s)" in result.stderr  # the old code ported it twice
    assert (tmp_path / "b.py").is_symlink() and "get_accelerator" in (tmp_path / "a.py").read_text()


def test_missing_libcst_is_explained(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "libcst.py").write_text("raise ImportError('No module named libcst')\n")
    result = subprocess.run(
        [sys.executable, "-m", "anyaccel", "port", "train.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": f"{blocker}{os.pathsep}{SRC}"},
        timeout=120,
    )
    assert result.returncode == 2
    assert (
        "pip install 'libcst>=1.0' (from a clone of anyaccel: pip install -e '.[port]')"
        in result.stderr
        and "Traceback" not in result.stderr
    )


def test_import_anyaccel_and_check_do_not_import_libcst(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    code = (
        "import sys\nfrom anyaccel.cli import main\nstatus = main(['check', sys.argv[1]])\n"
        "print(status, 'libcst' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=120,
    )
    assert result.stdout.splitlines()[-1] == "1 False", result.stderr


def test_write_ports_a_file_with_classic_mac_line_ends(tmp_path: Path) -> None:
    script = tmp_path / "cr.py"
    script.write_bytes(b"import torch\rx = torch.zeros(3).cuda()\rif True:\r    pass\r")
    result = run_port("--write", "cr.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    ported = script.read_bytes()
    assert b"\n" not in ported and b".to(get_accelerator().current_device_name())\r" in ported


def test_each_precision_choice_is_named_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n"
        "with torch.cuda.amp.autocast():\n    pass\n"
    )
    for args in (("train.py",), ("--write", "train.py")):
        result = run_port(*args, cwd=tmp_path)
        notes = [line for line in result.stderr.splitlines() if line.startswith("precision: ")]
        assert [note.split(": ")[1] for note in notes] == ["train.py:3", "train.py:4"], notes
        assert "grad_scaler_applies()" in notes[0]
        assert "autocast_dtype(torch.float16)" in notes[1]
    assert "dtype=autocast_dtype(torch.float16)" in (tmp_path / "train.py").read_text()
