"""Checks on a cached library before the loader maps it: a truncated file would kill the process.

The loader maps a truncated library and dies with SIGBUS on the missing pages, so the size
recorded at build time and the ELF headers' extents are checked first (reads < 4 KiB).
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO


def library_problem(library: BinaryIO, expected_bytes: object) -> str | None:
    """Why an open cached library would not load (found before the loader maps it), or None.

    ``expected_bytes`` is the size its build recorded (``library_bytes`` in the stamp).
    """
    try:
        size = os.fstat(library.fileno()).st_size
        if isinstance(expected_bytes, int) and size != expected_bytes:
            return f"file too short or changed: {size} bytes, the build wrote {expected_bytes}"
        return elf_problem(library, library.read(64), size)
    except (OSError, ValueError) as exc:
        return f"cannot read the cached library: {exc}"


def elf_problem(library: BinaryIO, header: bytes, size: int) -> str | None:
    """Whether an ELF file's section table and loadable segments end within its ``size``."""
    if header[:4] != b"\x7fELF":
        return None  # not ELF (e.g. Mach-O): the recorded size is the only check
    if len(header) < 52:
        return f"file too short: {size} bytes is less than an ELF header"
    order = "<" if header[5] == 1 else ">"
    if header[4] == 2:  # 64-bit
        phoff, shoff = struct.unpack_from(order + "QQ", header, 32)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", header, 54)
        segment, fields = order + "IIQQQQ", (0, 2, 5)  # p_type, p_offset, p_filesz
    else:
        phoff, shoff = struct.unpack_from(order + "II", header, 28)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", header, 42)
        segment, fields = order + "IIIIII", (0, 1, 4)
    table_end = shoff + shentsize * shnum
    if table_end > size:
        return f"file too short: {size} bytes, its ELF section table ends at {table_end}"
    library.seek(phoff)
    table = library.read(phentsize * phnum)
    for index in range(phnum):
        entry = table[index * phentsize : (index + 1) * phentsize]
        if len(entry) < struct.calcsize(segment):
            return f"file too short: {size} bytes, its ELF program headers are cut"
        values = struct.unpack_from(segment, entry)
        kind, offset, filesz = (values[field] for field in fields)
        if kind == 1 and offset + filesz > size:  # PT_LOAD
            return f"file too short: {size} bytes, a loadable segment ends at {offset + filesz}"
    return None
