"""Reading and writing source files byte-exactly, and replacing them only whole."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from anyaccel.porting.source_text import (
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
