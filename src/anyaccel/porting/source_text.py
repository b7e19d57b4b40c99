"""Python source files read and written as they are on disk: encoding, BOM and line endings kept.

``read_source`` decodes a file the way Python does (a UTF-8 BOM, else a PEP 263 coding
cookie, else UTF-8) without translating line endings, so ``\\r\\n`` stays ``\\r\\n``;
``SourceFile.encode`` turns a (ported) text back into bytes with the same BOM and encoding.
``write_atomically`` replaces a file only through a fsynced temporary in its own directory,
so a file is never left half written.

A file is read only if it is a regular file once opened (never a pipe or device, opened
without waiting), never more than the size it reports, and, for a file the walk found, only if
its real location is still inside the tree. A write replaces exactly the file that was read:
if another file (or a link) took its place since, nothing is written.
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
from anyaccel.porting.source_files import FileIdentity, refusal

__all__ = [
    "MAX_SOURCE_BYTES",
    "PreparedWrite",
    "SourceFile",
    "SourceReadError",
    "SourceWriteError",
    "newline_of",
    "read_source",
    "writable_problem",
    "write_atomically",
]


#: The largest file read as a source (64 MiB): a bigger ``*.py`` is data or a disk image, and
#: reading it whole would take as much memory, twice over.
MAX_SOURCE_BYTES = 64 << 20


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
    real_path: Path | None = None  # where the bytes were read (symlinks resolved)
    identity: FileIdentity | None = None  # which file was read, to write that one only

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


def read_source(path: Path, root: Path | None = None) -> SourceFile:
    """The file at ``path`` decoded as Python decodes it, line endings untouched.

    ``root``: the real directory the file must be in (the walk's; None for a file named
    explicitly). Raises ``SourceReadError`` naming the file when it is refused (see
    ``source_files.refusal``), cannot be read, is not text (a NUL byte), declares an unknown
    encoding, or is not valid in its encoding.
    """
    data, real, identity = _read_regular(path, root)
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
    return SourceFile(path, text, codec, bom, real, identity)


def _read_regular(path: Path, root: Path | None) -> tuple[bytes, Path, FileIdentity]:
    """The bytes of the regular file at ``path``, its real path and identity, or refused.

    Checked before opening (``refusal``), opened without blocking (a pipe swapped in is not
    waited on), checked again on the open descriptor, and read up to the size it reports.
    """
    try:
        problem = refusal(path, root)
    except FileNotFoundError:
        raise SourceReadError(
            f"{path}: cannot read: no such file or directory (it may have been removed "
            "during the run)"
        ) from None
    if problem is not None:
        raise SourceReadError(f"{path}: {problem}")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    flags |= getattr(os, "O_BINARY", 0)  # Windows: no newline translation
    try:
        fd = os.open(path, flags)
    except OSError as error:
        raise SourceReadError(f"{path}: cannot read: {error.strerror or error}") from None
    try:
        opened = os.fstat(fd)
        real = Path(os.path.realpath(path))
        problem = refusal(real, root)
        if problem is not None:  # a link was pointed elsewhere between the check and open
            raise SourceReadError(f"{path}: {problem}")
        if not stat.S_ISREG(opened.st_mode) or FileIdentity.of(os.stat(real)) != FileIdentity.of(
            opened
        ):
            raise SourceReadError(
                f"{path}: cannot read: another file took its place while it was being opened; "
                "it is left as it is: run again once nothing else changes the tree"
            )
        if opened.st_size > MAX_SOURCE_BYTES:
            raise SourceReadError(
                f"{path}: cannot read: {opened.st_size} bytes, more than the "
                f"{MAX_SOURCE_BYTES >> 20} MiB a source file is read up to (generated data or a "
                "disk image?); it is left as it is: --exclude it"
            )
        data = _read_at_most(fd, opened.st_size, path)
    except OSError as error:
        raise SourceReadError(f"{path}: cannot read: {error.strerror or error}") from None
    finally:
        os.close(fd)
    return data, real, FileIdentity.of(opened)


def _read_at_most(fd: int, size: int, path: Path) -> bytes:
    """The ``size`` bytes of an open regular file; refused if it gives more or would wait."""
    chunks: list[bytes] = []
    left = size + 1  # one byte more tells a file that grows (or a pseudo-file) apart
    while left > 0:
        try:
            chunk = os.read(fd, min(left, 1 << 20))
        except BlockingIOError:
            raise SourceReadError(
                f"{path}: cannot read: it would wait for data that may never come (a "
                "pseudo-file, not a source file on disk); it is left as it is"
            ) from None
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    if left <= 0:
        raise SourceReadError(
            f"{path}: cannot read: it gives more than the {size} byte(s) it reports (a "
            "pseudo-file that may never end, or a file being written); it is left as it is"
        )
    return b"".join(chunks)


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

    def __init__(self, path: Path, data: bytes, source: SourceFile | None = None) -> None:
        """Write ``data`` to a temporary in the directory of ``path`` (its real location).

        ``source``: the file as it was read; then its real path is the one replaced, and only
        while it is still that file. Raises ``SourceWriteError`` when the file is read-only or
        the temporary cannot be made.
        """
        self.path = path
        self.identity: FileIdentity | None
        if source is not None and source.real_path is not None and source.identity is not None:
            self.target, self.identity = source.real_path, source.identity
        else:  # a symlink keeps pointing at the file
            self.target = Path(os.path.realpath(path))
            self.identity = _identity_or_none(self.target)
        problem = writable_problem(self.target)
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

        Raises ``SourceWriteError`` when the rename fails or the file is no longer the one
        that was read (a link or another file put in its place); it is then left as it is.
        """
        if self.temporary is None:
            raise SourceWriteError(f"{self.path}: this write was already committed or discarded")
        if self.identity is not None and _identity_or_none(self.target) != self.identity:
            self.discard()
            raise SourceWriteError(
                f"{self.path}: not written: {self.target} is no longer the file that was read "
                "(it was changed, or another file or a symbolic link took its place); it is "
                "left as it is: run again once nothing else changes the tree"
            )
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


def _identity_or_none(path: Path) -> FileIdentity | None:
    """The identity of the regular file at ``path`` itself (a symlink there is not followed)."""
    try:
        found = os.lstat(path)
    except OSError:
        return None
    return FileIdentity.of(found) if stat.S_ISREG(found.st_mode) else None


def write_atomically(path: Path, data: bytes) -> None:
    """Replace the file at ``path`` by ``data``: temporary, fsync, same mode bits, rename.

    Raises ``SourceWriteError`` naming the file when it is read-only or cannot be written;
    the file is then left as it was.
    """
    PreparedWrite(path, data).commit()
