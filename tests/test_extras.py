"""Install lines for anyaccel's extras work from a wheel and a clone, and the docs use them."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from anyaccel.extras import extra_requirements, install_hint

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the gate runs 3.11
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
EXTRAS: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _key(text: str) -> tuple[str, str]:
    """A requirement as (canonical name, specifier): pytorch_lightning is pytorch-lightning."""
    requirement = Requirement(text)
    return canonicalize_name(requirement.name), str(requirement.specifier)


def _flattened(extra: str) -> set[tuple[str, str]]:
    """The extra's requirements from pyproject.toml, nested ``anyaccel[...]`` expanded."""
    found: set[str] = set()
    for line in EXTRAS[extra]:
        requirement = Requirement(line)
        if requirement.name == "anyaccel":
            for nested in requirement.extras:
                found |= _flattened(nested)
        else:
            found.add(_key(line))
    return found


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_each_extra_lists_what_pyproject_declares(extra: str) -> None:
    assert {_key(r) for r in extra_requirements(extra)} == _flattened(extra)


def test_a_nested_extra_brings_its_own_requirements() -> None:
    names = {Requirement(r).name for r in extra_requirements("transformers")}
    assert names == {"transformers", "accelerate"}


def test_an_unknown_extra_is_refused_with_the_ones_that_exist() -> None:
    with pytest.raises(LookupError, match=r"no extra 'lightnin'.*lightning"):
        extra_requirements("lightnin")


def test_an_uninstalled_distribution_is_refused() -> None:
    with pytest.raises(LookupError, match="not-a-distribution-xyz is not installed"):
        extra_requirements("x", distribution="not-a-distribution-xyz")


def test_the_hint_is_a_pip_line_of_valid_requirements_and_the_clone_form() -> None:
    hint = install_hint("lightning")
    command, _, clone = hint.partition(" (")
    words = shlex.split(command)
    assert words[:2] == ["pip", "install"]
    assert {_key(word) for word in words[2:]} == _flattened("lightning")
    assert clone == "from a clone of anyaccel: pip install -e '.[lightning]')"


def test_without_metadata_the_hint_is_the_clone_form() -> None:
    expected = "from a clone of anyaccel: pip install -e '.[no-such-extra]'"
    assert install_hint("no-such-extra") == expected


# The docs name an extra only in forms that install from a clone or a wheel, never the index form.
INDEX_FORM = re.compile(r"""pip install ["']?anyaccel\[""")
CLONE_FORM = re.compile(r"""pip install -e ["']?\.\[([\w,-]+)\]""")


def test_no_page_tells_users_to_install_anyaccel_from_an_index() -> None:
    offenders = []
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if INDEX_FORM.search(line) and "finds nothing" not in line:
                offenders.append(f"{page.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_every_extra_the_docs_install_exists() -> None:
    named = {
        extra
        for page in PAGES
        for match in CLONE_FORM.finditer(page.read_text(encoding="utf-8"))
        for extra in match.group(1).split(",")
    }
    assert named, "the docs show no clone install line"
    assert named <= set(EXTRAS), named - set(EXTRAS)
