"""``anyaccel check`` and ``port`` on files people really have, run as a user runs them.

CRLF and mixed line endings, a UTF-8 BOM, a latin-1 coding cookie, symlink loops, read-only
files, binary files named ``.py``, absurdly deep expressions: each is kept byte for byte or is
one clear error (exit 2, no traceback) while the other files are still checked or ported.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ports import free_port

SRC = Path(__file__).resolve().parents[2] / "src"
PORTED_LINE = b"get_accelerator().synchronize()"


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "anyaccel", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=120,
    )


def _no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr, result.stderr


def test_write_keeps_crlf_endings_byte_for_byte(tmp_path: Path) -> None:
    lines = [b"import torch", b"", b"def f():", b"    torch.cuda.synchronize()", b"    return 1"]
    (tmp_path / "m.py").write_bytes(b"\r\n".join(lines) + b"\r\n")
    result = run_cli("port", "--write", "m.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = (tmp_path / "m.py").read_bytes()
    assert data.count(b"\n") == data.count(b"\r\n") == len(lines) + 1  # + the import
    assert b"    " + PORTED_LINE + b"\r\n" in data
    assert data.startswith(b"import torch\r\nfrom anyaccel import get_accelerator\r\n")


def test_mixed_endings_outside_the_change_are_kept(tmp_path: Path) -> None:
    source = b"import torch\r\nA = 1\nB = 2\r\ntorch.cuda.synchronize()\nC = 3\r\n"
    (tmp_path / "m.py").write_bytes(source)
    assert run_cli("port", "--write", "m.py", cwd=tmp_path).returncode == 0
    data = (tmp_path / "m.py").read_bytes()
    assert b"A = 1\nB = 2\r\n" in data and data.endswith(PORTED_LINE + b"\nC = 3\r\n")


def test_old_mac_cr_endings_are_checked_line_by_line(tmp_path: Path) -> None:
    source = b"import torch\rx = torch.zeros(3).cuda()\rif True:\r    torch.cuda.synchronize()\r"
    (tmp_path / "m.py").write_bytes(source)
    check = run_cli("check", "m.py", cwd=tmp_path)
    _no_traceback(check)
    assert check.returncode == 1, (check.stdout, check.stderr)
    assert "m.py:2:5: ACC030" in check.stdout and "m.py:4:5: ACC001" in check.stdout
    port = run_cli("port", "--write", "m.py", cwd=tmp_path)
    _no_traceback(port)
    # Ported (CR endings kept) or one clear error with the file untouched: never "nothing to port".
    data = (tmp_path / "m.py").read_bytes()
    if port.returncode == 0:
        assert PORTED_LINE in data and b"\n" not in data, data
    else:
        assert port.returncode == 2 and "m.py" in port.stderr and data == source


def test_form_feeds_do_not_shift_inline_ignores(tmp_path: Path) -> None:
    # Python does not break lines at a form feed (str.splitlines does): line 3 is silenced.
    source = (
        b"import torch\n\x0c\nA = torch.zeros(1).cuda()  # anyaccel: ignore\n"
        b"B = 1; torch.cuda.synchronize()\n"
    )
    (tmp_path / "m.py").write_bytes(source)
    check = run_cli("check", "m.py", cwd=tmp_path)
    assert check.returncode == 1, check.stderr
    assert "m.py:4:8: ACC001" in check.stdout, check.stdout
    assert "m.py:3:" not in check.stdout


def test_a_utf8_bom_file_is_checked_and_ported_and_keeps_its_bom(tmp_path: Path) -> None:
    body = "import torch\n# café\ntorch.cuda.synchronize()\n".encode()
    (tmp_path / "m.py").write_bytes(b"\xef\xbb\xbf" + body)
    check = run_cli("check", "m.py", cwd=tmp_path)
    assert check.returncode == 1 and "m.py:3:1: ACC001" in check.stdout, check.stderr
    port = run_cli("port", "--write", "m.py", cwd=tmp_path)
    assert port.returncode == 0, port.stderr
    data = (tmp_path / "m.py").read_bytes()
    assert data.startswith(b"\xef\xbb\xbfimport torch\n") and data.count(b"\xef\xbb\xbf") == 1
    assert "# café\n".encode() in data and data.endswith(PORTED_LINE + b"\n")


def test_a_latin1_coding_cookie_is_read_and_written_in_latin1(tmp_path: Path) -> None:
    source = b"# -*- coding: latin-1 -*-\nimport torch\n# caf\xe9\ntorch.cuda.synchronize()\n"
    (tmp_path / "m.py").write_bytes(source)
    assert run_cli("check", "m.py", cwd=tmp_path).returncode == 1
    result = run_cli("port", "--write", "m.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = (tmp_path / "m.py").read_bytes()
    assert b"# caf\xe9\n" in data and data.endswith(PORTED_LINE + b"\n")


def test_an_undecodable_file_is_one_error_and_the_others_are_ported(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_bytes(b"import torch\n# caf\xe9\ntorch.cuda.synchronize()\n")
    (tmp_path / "binary.py").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00torch.cuda")
    (tmp_path / "good.py").write_bytes(b"import torch\ntorch.cuda.synchronize()\n")
    check = run_cli("check", ".", cwd=tmp_path)
    assert check.returncode == 2 and "good.py:2:1: ACC001" in check.stdout
    assert "bad.py: cannot read: byte 18 is not valid utf-8" in check.stderr
    assert "binary.py: cannot read: a binary file" in check.stderr
    port = run_cli("port", "--write", ".", cwd=tmp_path)
    _no_traceback(port)
    assert port.returncode == 2 and "2 error(s)" in port.stderr
    assert (tmp_path / "good.py").read_bytes().endswith(PORTED_LINE + b"\n")


def test_a_symlink_loop_is_one_error_and_the_rest_is_still_checked(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").symlink_to("b.py")
    (package / "b.py").symlink_to("a.py")
    (package / "m.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    check = run_cli("check", ".", cwd=tmp_path)
    _no_traceback(check)
    assert check.returncode == 2 and "m.py:2:1: ACC001" in check.stdout
    assert check.stderr.count("symbolic link loop") == 2
    port = run_cli("port", "--write", ".", cwd=tmp_path)
    _no_traceback(port)
    assert port.returncode == 2 and "ported 1 of 1 file(s)" in port.stderr
    assert (package / "m.py").read_bytes().endswith(PORTED_LINE + b"\n")


def test_a_read_only_file_stops_every_write_and_leaves_no_temporary(tmp_path: Path) -> None:
    """All or nothing: the tree is never left half ported (holds as root: mode bits decide)."""
    before = b"import torch\ntorch.cuda.synchronize()\n"
    for name in ("a.py", "locked.py", "z.py"):
        (tmp_path / name).write_bytes(before)
    (tmp_path / "locked.py").chmod(0o444)
    result = run_cli("port", "--write", ".", cwd=tmp_path)
    _no_traceback(result)
    assert result.returncode == 2
    assert "locked.py: cannot write: the file is read-only (mode -r--r--r--)" in result.stderr
    assert "nothing was written" in result.stderr
    assert all((tmp_path / n).read_bytes() == before for n in ("a.py", "locked.py", "z.py"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py", "locked.py", "z.py"]


def test_write_replaces_atomically_keeping_mode_and_symlinks(tmp_path: Path) -> None:
    real = tmp_path / "real.py"
    real.write_bytes(b"import torch\ntorch.cuda.synchronize()\n")
    real.chmod(0o750)
    (tmp_path / "link.py").symlink_to("real.py")
    result = run_cli("port", "--write", "link.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "link.py").is_symlink() and real.read_bytes().endswith(PORTED_LINE + b"\n")
    assert stat.S_IMODE(real.stat().st_mode) == 0o750


@pytest.mark.parametrize("terms", [600, 20_000], ids=["too deep for libcst", "too deep for ast"])
def test_a_very_deep_expression_is_one_clear_error(tmp_path: Path, terms: int) -> None:
    deep = "import torch\nx = " + " + ".join(["torch.cuda.current_device()"] * terms) + "\n"
    (tmp_path / "deep.py").write_text(deep)
    (tmp_path / "good.py").write_bytes(b"import torch\ntorch.cuda.synchronize()\n")
    port = run_cli("port", "--write", ".", cwd=tmp_path)
    _no_traceback(port)
    assert port.returncode == 2 and "deep.py" in port.stderr and "nested" in port.stderr
    assert (tmp_path / "deep.py").read_text() == deep
    assert (tmp_path / "good.py").read_bytes().endswith(PORTED_LINE + b"\n")
    check = run_cli("check", "deep.py", cwd=tmp_path)
    _no_traceback(check)
    assert check.returncode in (1, 2)  # found, or "nested too deeply": never a traceback


@pytest.mark.parametrize("command", [("check",), ("port", "--write")])
def test_an_empty_path_is_refused_not_read_as_the_current_directory(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    source = b"import torch\ntorch.cuda.synchronize()\n"
    (tmp_path / "m.py").write_bytes(source)
    result = run_cli(*command, "", cwd=tmp_path)  # `anyaccel check "$UNSET"`
    _no_traceback(result)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "empty path" in result.stderr and "m.py" not in result.stdout + result.stderr
    assert (tmp_path / "m.py").read_bytes() == source


def test_github_annotations_escape_commas_colons_and_newlines_in_file_names(
    tmp_path: Path,
) -> None:
    name = "we,ird:na\nme.py"
    (tmp_path / name).write_bytes(b"import torch\ntorch.cuda.synchronize()\n")
    result = run_cli("check", "--format", "github", ".", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("::error file="), result.stdout
    properties = dict(
        item.split("=", 1) for item in lines[0][len("::error ") :].split("::", 1)[0].split(",")
    )
    assert set(properties) == {"file", "line", "col", "title"}, properties
    decoded = properties["file"]
    for code, char in (("%2C", ","), ("%3A", ":"), ("%0A", "\n"), ("%0D", "\r"), ("%25", "%")):
        decoded = decoded.replace(code, char)
    assert decoded == name and properties["line"] == "2", properties


FSDP_SCRIPT = """\
import os
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("gloo", rank=0, world_size=1)
torch.manual_seed(0)  # unseeded, about one start in a hundred printed a loss of 0.0000 throughout
model = FSDP(torch.nn.Linear(8, 1), device_id=local_rank)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.ones(4, 8)
for step in range(3):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.6e}", flush=True)
dist.destroy_process_group()
os._exit(0)  # past torch's gloo exit abort (docs/distributed.md): this tests the port
"""


def test_a_ported_fsdp_script_trains_on_the_cpu_where_the_original_fails(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("the original runs as well on a machine with CUDA")
    (tmp_path / "train.py").write_text(FSDP_SCRIPT)
    port = str(free_port())
    env = {**os.environ, "PYTHONPATH": str(SRC), "DS_ACCELERATOR": "cpu", "LOCAL_RANK": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}  # fmt: skip

    def train() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "train.py"], capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=120)  # fmt: skip

    original = train()
    assert original.returncode != 0 and "step 0" not in original.stdout  # torch.device(0)
    result = run_cli("port", "--write", "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "train.py").read_text()
    assert "device_id=get_accelerator().device_name(local_rank)" in text
    ported = train()
    assert ported.returncode == 0, ported.stderr[-2000:]
    losses = [float(line.split()[-1]) for line in ported.stdout.splitlines()]
    assert len(losses) == 3 and losses[2] < losses[0], ported.stdout  # it trains
