"""mkdocs hooks: every nav page must exist, and links out of docs/ are made readable.

The nav in mkdocs.yml lists every page the site has; an entry whose file is missing (a page
renamed or lost in a change) stops the build with an error naming it, in every mode, so
``mkdocs build --strict`` cannot pass without a page. A relative link that leaves docs/
(``../examples/foo/``) cannot resolve on the site, so it becomes the path in the source tree,
as code.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

# [text](../path) where the target leaves docs/; not images, not absolute URLs.
_OUTSIDE_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\((\.\./[^)\s#]+)(#[^)\s]*)?\)")


def missing_pages(entries: list[Any], docs_dir: Path) -> list[str]:
    """``'Title (page.md)'`` for each nav entry, at any depth, whose page is not in docs_dir."""
    missing: list[str] = []
    for entry in entries:
        title, target = next(iter(entry.items())) if isinstance(entry, dict) else (None, entry)
        if isinstance(target, list):
            missing.extend(missing_pages(target, docs_dir))
        elif "://" not in str(target) and not (docs_dir / str(target)).is_file():
            missing.append(f"{title!r} ({target})" if title else str(target))
    return missing


def on_config(config: Any) -> Any:
    """Refuse to build when a nav entry's page does not exist."""
    missing = missing_pages(config["nav"] or [], Path(config["docs_dir"]))
    if missing:
        raise PluginError(
            f"mkdocs.yml's nav lists pages that are not in {config['docs_dir']}: "
            f"{', '.join(missing)}. Write the page, fix its path, or remove the nav entry."
        )
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
