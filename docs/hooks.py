"""mkdocs hooks: a nav that lists only written pages, and links out of docs/ made readable.

Pages are written by several people; the nav in mkdocs.yml lists every page the site should
have, and an entry whose file does not exist yet is left out (logged) instead of failing
``mkdocs build --strict``. A relative link that leaves docs/ (``../examples/foo/``) cannot
resolve on the site, so it becomes the path in the source tree, as code.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.anyaccel")

# [text](../path) where the target leaves docs/; not images, not absolute URLs.
_OUTSIDE_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\((\.\./[^)\s#]+)(#[^)\s]*)?\)")


def _keep_written(entries: list[Any], docs_dir: Path) -> list[Any]:
    kept: list[Any] = []
    for entry in entries:
        if isinstance(entry, dict):
            (title, target), *_ = entry.items()
            if isinstance(target, list):
                children = _keep_written(target, docs_dir)
                if children:
                    kept.append({title: children})
            elif "://" in str(target) or (docs_dir / str(target)).is_file():
                kept.append(entry)
            else:
                log.info("nav: %r (%s) is not written yet; left out", title, target)
        elif "://" in str(entry) or (docs_dir / str(entry)).is_file():
            kept.append(entry)
    return kept


def on_config(config: Any) -> Any:
    """Drop nav entries whose page does not exist."""
    if config["nav"]:
        config["nav"] = _keep_written(config["nav"], Path(config["docs_dir"]))
    return config


def source_path(target: str, page_path: str) -> str:
    """``../examples/x/`` seen from ``docs/page.md`` -> ``examples/x/`` in the repository."""
    parts = ["docs", *Path(page_path).parent.parts]
    for piece in target.split("/"):
        if piece == "..":
            if parts:
                parts.pop()
        elif piece not in ("", "."):
            parts.append(piece)
    return "/".join(parts) + ("/" if target.endswith("/") else "")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Links that leave docs/ become the source-tree path they point at."""

    def rewrite(match: re.Match[str]) -> str:
        text, target = match.group(1), match.group(2)
        path = source_path(target, page.file.src_path)
        if path.rstrip("/") in text:
            return text
        return f"{text} (`{path}` in the repository)"

    return _OUTSIDE_LINK.sub(rewrite, markdown)
