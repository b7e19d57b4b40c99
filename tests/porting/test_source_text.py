"""Reading and writing source files byte-exactly, and replacing them only whole."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from anyaccel.porting import source_files
from anyaccel.porting.source_text import (
    MAX_SOURCE_BYTES,
    PreparedWrite,
    SourceReadError,
    SourceWriteError,
    newline_of,
    read_source,
    writable_problem,
    write_atomically,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a\nb\n", "\n"),
        ("a\r\nb\r\n", "\r\n"),
        ("a\rb\r", "\r"),
        ("a\r\nb\nc\r\n", "\r\n"),
        ("", "\n"),
    ],
)
def test_newline_of_is_the_most_common_ending(text: str, expected: str) -> None:
    assert newline_of(text) == expected


def test_read_then_encode_round_trips_bom_cookie_and_endings(tmp_path: Path) -> None:
    cases = {
        "bom.py": b"\xef\xbb\xbfx = 1\r\n# \xc3\xa9\n",
        "latin.py": b"# coding: latin-1\r\nx = '\xe9'\r\n",
        "plain.py": b"x = 1\ry = 2\n",
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        source = read_source(tmp_path / name)
        assert "\ufeff" not in source.text and source.encode(source.text) == data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"# coding: no-such-codec\nx = 1\n", "unknown encoding"),
        (b"x = '\xff'\n", "byte 5 is not valid utf-8"),
        (b"x = 1\0\n", "a binary file"),
    ],
)
def test_unreadable_sources_name_the_file_and_why(
    tmp_path: Path, data: bytes, message: str
) -> None:
    (tmp_path / "m.py").write_bytes(data)
    with pytest.raises(SourceReadError, match=message) as caught:
        read_source(tmp_path / "m.py")
    assert str(tmp_path / "m.py") in str(caught.value)


def test_a_character_the_declared_encoding_lacks_is_refused(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_bytes(b"# coding: latin-1\nx = 1\n")
    with pytest.raises(SourceWriteError, match="declared encoding iso-8859-1"):
        read_source(tmp_path / "m.py").encode("# coding: latin-1\nx = '\u20ac'\n")


def test_write_atomically_keeps_the_mode_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "m.py"
    target.write_bytes(b"old\n")
    target.chmod(0o640)
    write_atomically(target, b"new\n")
    assert target.read_bytes() == b"new\n" and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["m.py"]


def test_a_discarded_write_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    target = tmp_path / "m.py"
    target.write_bytes(b"old\n")
    prepared = PreparedWrite(target, b"new\n")
    assert len(list(tmp_path.iterdir())) == 2  # the file and its temporary
    prepared.discard()
    assert target.read_bytes() == b"old\n" and [p.name for p in tmp_path.iterdir()] == ["m.py"]
    with pytest.raises(SourceWriteError, match="already committed or discarded"):
        prepared.commit()


def test_a_file_without_write_bits_is_read_only_even_for_root(tmp_path: Path) -> None:
    target = tmp_path / "m.py"
    target.write_bytes(b"old\n")
    assert writable_problem(target) is None
    target.chmod(0o444)
    assert "read-only (mode -r--r--r--)" in (writable_problem(target) or "")
    with pytest.raises(SourceWriteError, match="chmod u\\+w"):
        write_atomically(target, b"new\n")
    assert target.read_bytes() == b"old\n"


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc")
def test_a_file_that_gives_more_than_its_size_is_not_read_to_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With /proc not named as a pseudo-filesystem, the size cap alone must stop the read:
    # /proc files report size 0 and some (/proc/kmsg) never end.
    monkeypatch.setattr(source_files, "PSEUDO_FILESYSTEMS", ())
    (tmp_path / "status.py").symlink_to("/proc/self/status")
    with pytest.raises(SourceReadError, match=r"gives more than the 0 byte\(s\) it reports"):
        read_source(tmp_path / "status.py")
    (tmp_path / "empty.py").write_bytes(b"")
    assert read_source(tmp_path / "empty.py").text == ""


def test_a_file_beyond_the_size_limit_is_refused_by_its_size_before_it_is_read(
    tmp_path: Path,
) -> None:
    huge = tmp_path / "huge.py"
    with huge.open("wb") as out:  # sparse: no disk used; read whole, it took 2x its size in RSS
        out.truncate(MAX_SOURCE_BYTES + 1)
    with pytest.raises(
        SourceReadError, match=f"{MAX_SOURCE_BYTES + 1} bytes, more than the 64 MiB"
    ):
        read_source(huge)
    at_limit = tmp_path / "at_limit.py"
    at_limit.write_bytes(b"x = 1\n" + b"#" * 64 + b"\n")
    assert read_source(at_limit).text.startswith("x = 1")


def test_a_link_pointed_out_of_the_tree_after_the_walk_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "own.py").write_text("x = 1\n")
    (tmp_path / "outside.py").write_text("secret = 1\n")
    link = tmp_path / "tree" / "link.py"
    link.symlink_to("own.py")
    [found] = [f for f in source_files.iter_python_files([tmp_path / "tree"], []) if f.path == link]
    link.unlink()
    link.symlink_to("../outside.py")  # another process swaps the link between walk and read
    outside_the_tree = re.escape(f"outside {tmp_path.resolve() / 'tree'} (the tree given)")
    with pytest.raises(SourceReadError, match=outside_the_tree):
        read_source(found.path, found.root)
    assert found.root == (tmp_path / "tree").resolve()
    assert read_source(found.path).text == "secret = 1\n"  # named explicitly: allowed


@pytest.mark.parametrize("swap", ["a symbolic link", "another file"])
def test_a_write_goes_only_to_the_file_that_was_read(tmp_path: Path, swap: str) -> None:
    target = tmp_path / "m.py"
    target.write_bytes(b"old\n")
    victim = tmp_path / "victim.py"
    victim.write_bytes(b"victim\n")
    prepared = PreparedWrite(target, b"new\n", read_source(target, tmp_path.resolve()))
    target.unlink()  # swapped after the read, before the write
    if swap == "a symbolic link":
        target.symlink_to(victim)
    else:
        target.write_bytes(b"theirs\n")
    with pytest.raises(SourceWriteError, match="no longer the file that was read"):
        prepared.commit()
    assert victim.read_bytes() == b"victim\n"
    assert target.is_symlink() if swap == "a symbolic link" else target.read_bytes() == b"theirs\n"
    assert not list(tmp_path.glob("*.anyaccel-tmp"))
