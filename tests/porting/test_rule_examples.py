"""Every rule's own examples are its tests: ``check`` and ``port`` must agree with them."""

from __future__ import annotations

import pytest

from anyaccel.porting import rule as rule_module
from anyaccel.porting.checker import check_source
from anyaccel.porting.rule import DuplicateRuleError, Invalid, PortingRule
from anyaccel.porting.rules import CALL_ORDER, RULES

UNITS = list(RULES.values())
VALID = [(unit, example) for unit in UNITS for example in unit.VALID]
INVALID = [(unit, example) for unit in UNITS for example in unit.INVALID]


def _id(case: object) -> str:
    if isinstance(case, PortingRule):
        return case.code
    return repr(case.code if isinstance(case, Invalid) else case)[:60]


@pytest.mark.parametrize("unit", UNITS, ids=_id)
def test_every_rule_has_valid_and_invalid_examples(unit: PortingRule) -> None:
    assert unit.VALID, f"{unit.code} has no VALID example"
    assert unit.INVALID, f"{unit.code} has no INVALID example"
    assert all(isinstance(example, Invalid) for example in unit.INVALID), unit.code


@pytest.mark.parametrize("unit", [u for u in UNITS if u.portable], ids=_id)
def test_a_portable_rule_shows_its_port(unit: PortingRule) -> None:
    ported = [example.ported for example in unit.INVALID if example.ported is not None]
    assert ported, f"{unit.code} is portable but no INVALID example shows the port"


@pytest.mark.parametrize("unit", UNITS, ids=_id)
def test_every_hook_of_a_rule_is_one_the_walks_call(unit: PortingRule) -> None:
    """A misspelt hook (``visit_Cal``) would never run: each must name a kind the walks know."""
    pytest.importorskip("libcst")
    from anyaccel.porting import checker, porter

    known = {
        "visit": set(checker._HOOKS),
        "plan": set(porter._PLANS),
        "rewrite": set(porter._REWRITES),
    }
    for attribute in dir(unit):
        prefix, _, kind = attribute.partition("_")
        if prefix in known and kind and not kind.startswith("_"):
            assert kind in known[prefix], f"{unit.code}.{attribute} is never called"


def test_every_rule_that_rewrites_calls_has_a_place_of_its_own_in_the_call_order() -> None:
    rewriting = {unit.code for unit in UNITS if hasattr(unit, "rewrite_Call")}
    assert {unit.code for unit in CALL_ORDER} == rewriting
    ranks = [unit.call_rank for unit in CALL_ORDER]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)


def test_a_device_count_that_counts_processes_is_rewritten_before_device_count() -> None:
    order = [unit.code for unit in CALL_ORDER]
    assert order.index("ACC045") < order.index("ACC050")


def test_defining_a_rule_registers_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rule_module, "_registered", dict(rule_module._registered))

    class Planted(PortingRule):
        code = "ACC998"

    assert rule_module.registered_rules()["ACC998"] is Planted


def test_a_second_rule_with_a_taken_code_is_refused() -> None:
    with pytest.raises(DuplicateRuleError, match="claims rule code ACC043"):

        class Impostor(PortingRule):
            code = "ACC043"


def test_a_rule_that_rewrites_calls_without_a_rank_is_refused() -> None:
    with pytest.raises(TypeError, match="has no call_rank"):

        class Unranked(PortingRule):
            code = "ACC997"

            def rewrite_Call(self) -> None:
                """Never asked."""


def test_each_rule_module_is_named_after_the_codes_it_holds() -> None:
    for unit in UNITS:
        module = type(unit).__module__.rpartition(".")[2]
        first, _, rest = module.partition("_")
        low = int(first.removeprefix("acc"))
        high_text = rest.partition("_")[0]
        high = int(high_text) if high_text.isdigit() else low
        assert low <= int(unit.code.removeprefix("ACC")) <= high, (unit.code, module)


@pytest.mark.parametrize(("unit", "source"), VALID, ids=_id)
def test_valid_example_is_not_reported(unit: PortingRule, source: str) -> None:
    assert unit.code not in {f.code for f in check_source(source)}


@pytest.mark.parametrize(("unit", "example"), INVALID, ids=_id)
def test_invalid_example_is_reported(unit: PortingRule, example: Invalid) -> None:
    assert unit.code in {f.code for f in check_source(example.code)}


@pytest.mark.parametrize(("unit", "source"), VALID, ids=_id)
def test_valid_example_is_left_as_it_is_by_this_rule(unit: PortingRule, source: str) -> None:
    pytest.importorskip("libcst")
    from anyaccel.porting.codemod import port_source

    result = port_source(source)
    assert unit.code not in {f.code for f in check_source(result.ported)}


@pytest.mark.parametrize(("unit", "example"), INVALID, ids=_id)
def test_invalid_example_ports_as_shown(unit: PortingRule, example: Invalid) -> None:
    pytest.importorskip("libcst")
    from anyaccel.porting.codemod import port_source

    result = port_source(example.code)
    if example.ported is None:
        assert unit.code in {f.code for f in result.left}, "left for the user, and said so"
    else:
        assert result.ported == example.ported
        assert unit.code not in {f.code for f in result.left}
        assert port_source(result.ported).ported == result.ported  # a port ports to itself
