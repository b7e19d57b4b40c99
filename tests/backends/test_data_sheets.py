"""Each vendor fact is stated once, in its backend class: the probe, the registry and the
distributed set-up read it from there.

A vendor's runtime package and visible-devices variable are class data
(``runtime_package``, ``visible_devices_env_names``); a string anywhere else in the vendor's
module (docstrings aside), in the registry or in the distributed set-up that spells one of
them out is a second copy that can drift.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from anyaccel.backends.torch_module import TorchModuleAccelerator
from tests.test_settings import docstring_ids

SOURCE = Path(__file__).resolve().parents[2] / "src" / "anyaccel"

#: The vendor modules whose classes are their data sheets.
VENDORS = ("npu", "mlu", "musa", "sdaa", "supa", "klxpu", "xpu")

#: The modules that once restated vendor facts and must read them from the classes.
READERS = ("registry.py", "distributed/process_group.py")


def _stated_facts(cls: type[TorchModuleAccelerator]) -> set[str]:
    """The vendor facts ``cls`` itself states (not those it inherits)."""
    own = vars(cls)
    facts: set[str] = set()
    package = own.get("runtime_package")
    if isinstance(package, str):
        facts.add(package)
    envs = own.get("visible_devices_env_names")
    if isinstance(envs, tuple):
        facts.update(name for name in envs if isinstance(name, str))
    return facts


def _vendor_classes(module_name: str) -> list[type[TorchModuleAccelerator]]:
    module = importlib.import_module(f"anyaccel.backends.{module_name}")
    return [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, TorchModuleAccelerator)
        and value.__module__ == module.__name__
    ]


def _class_statements(tree: ast.AST) -> set[int]:
    """``id()`` of the string nodes of class-level ``runtime_package``/``visible_...`` lines."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for statement in node.body:
            targets: list[ast.expr] = []
            if isinstance(statement, ast.Assign):
                targets = statement.targets
            elif isinstance(statement, ast.AnnAssign):
                targets = [statement.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            if names & {"runtime_package", "visible_devices_env_names"}:
                found.update(id(n) for n in ast.walk(statement) if isinstance(n, ast.Constant))
    return found


def restatements(source: str, facts: set[str], *, allow_class_data: bool) -> list[str]:
    """``line: 'text'`` for every string in ``source`` that spells out one of ``facts``."""
    tree = ast.parse(source)
    skip = docstring_ids(tree) | (_class_statements(tree) if allow_class_data else set())
    return [
        f"line {node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skip
        and any(fact in node.value for fact in facts)
    ]


def _all_vendor_facts() -> set[str]:
    return {
        fact for name in VENDORS for cls in _vendor_classes(name) for fact in _stated_facts(cls)
    }


@pytest.mark.parametrize("module_name", VENDORS)
def test_a_vendor_module_states_its_class_data_once(module_name: str) -> None:
    classes = _vendor_classes(module_name)
    facts = {fact for cls in classes for fact in _stated_facts(cls)}
    assert facts, f"anyaccel.backends.{module_name} states no runtime package or variable"
    source = (SOURCE / "backends" / f"{module_name}.py").read_text(encoding="utf-8")
    assert restatements(source, facts, allow_class_data=True) == []


@pytest.mark.parametrize("relative", READERS)
def test_the_registry_and_distributed_read_vendor_facts_from_the_classes(relative: str) -> None:
    source = (SOURCE / relative).read_text(encoding="utf-8")
    assert restatements(source, _all_vendor_facts(), allow_class_data=False) == []


@pytest.mark.parametrize(
    "planted",
    [
        'PACKAGE = "torch_mlu"',
        'def probe():\n    return check(visible_env="MLU_VISIBLE_DEVICES")',
        'HINT = "install torch_mlu first"',
    ],
)
def test_the_check_finds_a_restated_fact(planted: str) -> None:
    source = (SOURCE / "backends" / "mlu.py").read_text(encoding="utf-8")
    facts = {fact for cls in _vendor_classes("mlu") for fact in _stated_facts(cls)}
    assert restatements(source, facts, allow_class_data=True) == []
    found = restatements(f"{source}\n\n{planted}\n", facts, allow_class_data=True)
    assert len(found) == 1, found
