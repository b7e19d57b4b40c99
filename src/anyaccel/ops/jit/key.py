"""The build key: a hash of every input that changes a compiled artefact.

The key names the build directory (``anyaccel_<library>_<key[:12]>``), so a cached build is
reused exactly while its sources, flags, torch, Python, machine and compiler stay the same.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from pathlib import Path

from anyaccel.ops.errors import OpBuildError
from anyaccel.ops.jit.toolchain import cxx_compiler

#: Bump when the layout of a build directory changes, to invalidate older caches.
LAYOUT_VERSION = "1"


def build_key(
    op_name: str,
    library: str,
    files: tuple[str, ...],
    flag_groups: tuple[tuple[str, ...], ...],
    *,
    with_cuda: bool,
) -> str:
    """The sha256 of the build context, ``flag_groups`` and the contents of ``files``, in hex.

    Raises ``OpBuildError`` naming the file when a source cannot be read.
    """
    import torch

    digest = hashlib.sha256()
    context = [
        LAYOUT_VERSION,
        library,
        torch.__version__,
        sys.implementation.cache_tag,
        platform.machine(),
        cxx_compiler(),
        str(with_cuda),
    ]
    digest.update(json.dumps([context, [list(group) for group in flag_groups]]).encode())
    for path in files:
        try:
            digest.update(Path(path).read_bytes())
        except OSError as exc:
            raise OpBuildError(
                f"op {op_name!r}: cannot read source {path}: {exc.strerror}; "
                "reinstall anyaccel or fix the builder's sources()"
            ) from exc
    return digest.hexdigest()
