"""The one reader of anyaccel's on/off environment variables, and that it is the only one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from anyaccel.errors import InvalidSettingError
from anyaccel.settings import OFF_VALUES, ON_VALUES, read_on_off

SOURCE = Path(__file__).resolve().parents[1] / "src" / "anyaccel"


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "True", "yes", "YES", "on", "On", " on "])
def test_the_documented_on_spellings_in_any_case_are_on(value: str) -> None:
    assert read_on_off("ANYACCEL_X", {"ANYACCEL_X": value}) is True


@pytest.mark.parametrize("value", ["0", "false", "FALSE", "False", "no", "NO", "off", "OFF", "0 "])
def test_the_documented_off_spellings_in_any_case_are_off(value: str) -> None:
    assert read_on_off("ANYACCEL_X", {"ANYACCEL_X": value}) is False


def test_unset_or_empty_is_not_set() -> None:
    assert read_on_off("ANYACCEL_X", {}) is None
    assert read_on_off("ANYACCEL_X", {"ANYACCEL_X": "  "}) is None


def test_os_environ_is_read_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYACCEL_X", "Off")
    assert read_on_off("ANYACCEL_X") is False


@pytest.mark.parametrize("value", ["enable", "2", "y", "n", "disabled", "-1", "truee"])
def test_any_other_value_is_refused_naming_the_variable_the_value_and_the_spellings(
    value: str,
) -> None:
    with pytest.raises(InvalidSettingError) as caught:
        read_on_off("ANYACCEL_X", {"ANYACCEL_X": value})
    message = str(caught.value)
    assert f"ANYACCEL_X={value!r} is not an on/off value" in message
    assert "1/true/yes/on (on) or 0/false/no/off (off), in any case" in message
    assert isinstance(caught.value, ValueError)


def test_the_spellings_are_the_documented_ones() -> None:
    assert ON_VALUES == ("1", "true", "yes", "on")
    assert OFF_VALUES == ("0", "false", "no", "off")
    page = (SOURCE.parents[1] / "docs" / "distributed.md").read_text()
    assert "`1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off`" in page


#: Modules that parse someone else's on/off variable with that project's own rules.
#: (the accelerate integration's ACCELERATE_USE_CPU, as accelerate reads it)
_OTHER_PROJECTS_RULES = {"integrations/accelerate/plan.py"}


def test_no_other_module_spells_the_on_off_words() -> None:
    """A second parser (one that forgets ``FALSE``, say) would show as a literal of the words."""
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        relative = path.relative_to(SOURCE).as_posix()
        if relative in {"settings.py", *_OTHER_PROJECTS_RULES}:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Tuple | ast.List | ast.Set):
                words = {e.value for e in node.elts if isinstance(e, ast.Constant)}
                if len(words & {"false", "off", "no", "true", "on", "yes"}) >= 2:
                    found.append(f"{relative}:{node.lineno}")
    assert found == [], f"on/off words outside anyaccel.settings: {found}"


#: Each environment variable read in more than one module, and the one module that names it.
_SHARED_NAMES = {
    "DS_ACCELERATOR": "probe.py",
    "ANYACCEL_EMULATED": "settings.py",
    "ANYACCEL_SIMULATED": "settings.py",
    "TORCH_DEVICE_BACKEND_AUTOLOAD": "settings.py",
}


def docstring_ids(tree: ast.AST) -> set[int]:
    """``id()`` of every string that is a statement of its own: docstrings, of attributes too."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def test_each_shared_environment_variable_is_named_in_one_module() -> None:
    """Messages and reads use the owner's constant, so a rename is one edit."""
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        relative = path.relative_to(SOURCE).as_posix()
        tree = ast.parse(path.read_text())
        docstrings = docstring_ids(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if id(node) in docstrings:
                continue
            for name, owner in _SHARED_NAMES.items():
                if re.search(rf"\b{name}\b", node.value) and relative != owner:
                    found.append(f"{relative}:{node.lineno}: {name}")
    assert found == [], f"shared environment variable names spelt outside their owner: {found}"
