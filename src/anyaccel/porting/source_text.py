"""Python source files read and written as they are on disk: encoding, BOM and line endings kept.

``read_source`` decodes a file the way Python does (a UTF-8 BOM, else a PEP 263 coding
cookie, else UTF-8) without translating line endings, so ``\\r\\n`` stays ``\\r\\n``;
``SourceFile.encode`` turns a (ported) text back into bytes with the same BOM and encoding.
``write_atomically`` replaces a file only through a fsynced temporary in its own directory,
so a file is never left half written.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import stat
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path

from anyaccel.errors import AnyaccelError

__all__ = [
    "PreparedWrite",
    "SourceFile",
    "SourceReadError",
    "SourceWriteError",
    "newline_of",
    "read_source",
    "writable_problem",
    "write_atomically",
]


class SourceReadError(AnyaccelError, ValueError):
    """A source file cannot be read or decoded; the message names the file and why."""


class SourceWriteError(AnyaccelError, ValueError):
    """A source file cannot be written; the message names the file, why, and what to do."""


@dataclass(frozen=True)
class SourceFile:
    """One file's text (line endings as on disk) and how to turn a text back into its bytes."""

    path: Path
    text: str
    encoding: str  # a codec name as tokenize reports it ("utf-8", "iso-8859-1", ...)
    bom: bool

    def encode(self, text: str) -> bytes:
        """``text`` as bytes in this file's encoding, with its BOM if it had one.

        Raises ``SourceWriteError`` when ``text`` holds a character the encoding cannot hold.
        """
        try:
            body = text.encode(self.encoding)
        except UnicodeEncodeError as error:
            raise SourceWriteError(
                f"{self.path}: the ported text cannot be written in the file's declared "
                f"encoding {self.encoding} ({error.reason} at character {error.start}); "
                "the file is left as it was"
            ) from None
        return (codecs.BOM_UTF8 + body) if self.bom else body


def read_source(path: Path) -> SourceFile:
    """The file at ``path`` decoded as Python decodes it, line endings untouched.

    Raises ``SourceReadError`` naming the file when it cannot be read, is not text (a NUL
    byte), declares an unknown encoding, or is not valid in its encoding.
    """
    try:
        data = path.read_bytes()
    except OSError as error:
        raise SourceReadError(f"{path}: cannot read: {error.strerror or error}") from None
    if b"\0" in data:
        raise SourceReadError(f"{path}: cannot read: a binary file (it holds NUL bytes)")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:  # an unknown codec in the cookie, or a BOM/cookie conflict
        if "invalid or missing encoding" not in error.msg:
            raise SourceReadError(f"{path}: cannot read: {error.msg}") from None
        encoding = "utf-8"  # not UTF-8 in its first lines: the decode below names the byte
    bom = data.startswith(codecs.BOM_UTF8)
    body = data[len(codecs.BOM_UTF8) :] if bom else data
    codec = "utf-8" if encoding == "utf-8-sig" else encoding
    try:
        text = body.decode(codec)
    except UnicodeDecodeError as error:
        raise SourceReadError(
            f"{path}: cannot read: byte {error.start + (3 if bom else 0)} is not valid "
            f"{codec} ({error.reason}); declare the file's encoding with a coding comment "
            "(PEP 263) or save it as UTF-8"
        ) from None
    return SourceFile(path, text, codec, bom)


def newline_of(text: str) -> str:
    """The line ending most lines of ``text`` use (``\\n`` when it has none)."""
    crlf = text.count("\r\n")
    lf = text.count("\n") - crlf
    cr = text.count("\r") - crlf
    return max((lf, "\n"), (crlf, "\r\n"), (cr, "\r"))[1] if crlf or cr else "\n"


def writable_problem(path: Path) -> str | None:
    """Why ``path`` should not be replaced (read-only, directory not writable), or None."""
    target = Path(os.path.realpath(path))
    try:
        mode = target.stat().st_mode
    except OSError as error:
        return f"cannot write: {error.strerror or error}"
    if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(target, os.W_OK):
        return (
            f"cannot write: the file is read-only (mode {stat.filemode(mode)}); make it "
            "writable (chmod u+w) or leave it out (--exclude)"
        )
    return None


class PreparedWrite:
    """New bytes for one file, already in a fsynced temporary beside it; ``commit`` renames."""

    def __init__(self, path: Path, data: bytes) -> None:
        """Write ``data`` to a temporary in the directory of ``path`` (its real location).

        Raises ``SourceWriteError`` when the file is read-only or the temporary cannot be made.
        """
        self.path = path
        self.target = Path(os.path.realpath(path))  # a symlink keeps pointing at the file
        problem = writable_problem(path)
        if problem is not None:
            raise SourceWriteError(f"{path}: {problem}")
        mode = stat.S_IMODE(self.target.stat().st_mode)
        try:
            handle, name = tempfile.mkstemp(
                prefix=f".{self.target.name}.", suffix=".anyaccel-tmp", dir=self.target.parent
            )
        except OSError as error:
            raise SourceWriteError(
                f"{path}: cannot write: cannot create a file in {self.target.parent} "
                f"({error.strerror or error}); make the directory writable"
            ) from None
        self.temporary: Path | None = Path(name)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(name, mode)
        except OSError as error:
            self.discard()
            raise SourceWriteError(
                f"{path}: cannot write: {error.strerror or error}; the file is left as it was"
            ) from None

    def commit(self) -> None:
        """Put the new bytes in place (one rename: the file is old or new, never half).

        Raises ``SourceWriteError`` when the rename fails (the file is then left as it was).
        """
        if self.temporary is None:
            raise SourceWriteError(f"{self.path}: this write was already committed or discarded")
        try:
            os.replace(self.temporary, self.target)
        except OSError as error:
            self.discard()
            raise SourceWriteError(
                f"{self.path}: cannot write: {error.strerror or error}; the file is left as it was"
            ) from None
        self.temporary = None

    def discard(self) -> None:
        """Remove the temporary; the file stays as it was."""
        if self.temporary is not None:
            with contextlib.suppress(OSError):
                self.temporary.unlink()
            self.temporary = None


def write_atomically(path: Path, data: bytes) -> None:
    """Replace the file at ``path`` by ``data``: temporary, fsync, same mode bits, rename.

    Raises ``SourceWriteError`` naming the file when it is read-only or cannot be written;
    the file is then left as it was.
    """
    PreparedWrite(path, data).commit()
