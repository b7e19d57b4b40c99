"""What a porting rule is: one unit with its code, message, detection, rewrite and examples.

A rule subclasses :class:`PortingRule`. ``anyaccel check`` walks a file once and calls each
rule's ``visit_<ast node>`` hooks with the :class:`Scope` it shares (imports, index names,
findings); rules that judge a dotted name (``torch.cuda.synchronize``) answer
:meth:`PortingRule.match_name` instead. ``anyaccel port`` walks the libcst tree once and calls
a rule's ``plan_<libcst node>`` hooks on the way down and its ``rewrite_<libcst node>`` hooks on
the way up, with the porter (``anyaccel.porting.rewriting.Rewriter``); those hooks import
libcst themselves, so checking never loads it. ``VALID`` and ``INVALID`` are the rule's
examples, and its tests: ``tests/porting/test_rule_examples.py`` runs every one through
``check`` and ``port``.

Defining the class registers the rule (:func:`registered_rules`): a rule is one class in a
module of :mod:`anyaccel.porting.rules`, and nothing else lists it.
"""

from __future__ import annotations

import ast
from typing import Any, ClassVar, NamedTuple, Protocol

from anyaccel.errors import AnyaccelError
from anyaccel.porting.analysis import IndexNames

__all__ = ["DuplicateRuleError", "Invalid", "PortingRule", "Scope", "registered_rules"]


class DuplicateRuleError(AnyaccelError, ValueError):
    """Two rule classes claim one code (codes are never reused)."""


#: Every rule class by code, as each registered itself when it was defined.
_registered: dict[str, type[PortingRule]] = {}


def registered_rules() -> dict[str, type[PortingRule]]:
    """The rule classes defined so far, by code, in code order."""
    return dict(sorted(_registered.items()))


class Invalid(NamedTuple):
    """Code the rule must report, and (portable rules) what ``port`` must turn it into."""

    code: str
    #: The whole file after ``anyaccel port``; ``None`` when the rule leaves it to the user.
    ported: str | None = None


class Scope(Protocol):
    """What ``check`` knows of the file being walked, and where a rule reports."""

    @property
    def aliases(self) -> dict[str, str]:
        """Local name -> the dotted name it was imported as."""
        ...

    @property
    def index_names(self) -> IndexNames:
        """The file's names bound only to ints, and those declared as something else."""
        ...

    def qualified_name(self, node: ast.expr) -> str | None:
        """``node``'s dotted name with imports resolved, or ``None`` for other expressions."""
        ...

    def report(self, node: ast.expr, code: str, name: str, attr: str = "") -> None:
        """A finding of rule ``code`` at ``node``: ``name`` fills its message, ``attr`` its fix."""
        ...

    def mark(self, code: str, node: ast.AST) -> None:
        """Remember ``node`` for rule ``code`` (seen from a parent, reported when visited)."""
        ...

    def is_marked(self, code: str, node: ast.AST) -> bool:
        """Whether rule ``code`` marked ``node``."""
        ...

    def claim(self, node: ast.AST) -> None:
        """``node`` belongs to the reporting rule: no other rule looks at it."""
        ...


class PortingRule:
    """One kind of hardware-specific code: how it is found, how it is fixed, and examples.

    Check hooks are ``visit_<ast node class>(node, scope) -> bool``: ``True`` means the rule
    dealt with the node, so later rules and the walk below it skip it. Port hooks are
    ``plan_<libcst node class>(node, porter)`` and ``rewrite_<libcst node class>(original,
    updated, porter)``, which returns the replacement or ``None`` (not this rule's).
    """

    code: ClassVar[str]
    name: ClassVar[str]
    message: ClassVar[str]  # ``{name}``: what was found
    suggestion: ClassVar[str]  # ``{attr}``: the part of the fix that depends on the code
    #: Whether ``anyaccel port`` rewrites it (in the common forms; see docs/porting.md).
    portable: ClassVar[bool]
    #: Whether ``port`` puts a statement that only does this under
    #: ``if get_accelerator().device_name() == "cuda":`` (it configures CUDA, harmless to skip).
    guarded: ClassVar[bool] = False
    #: Whether :meth:`match_name` is asked last (the names no other rule claims).
    catch_all: ClassVar[bool] = False
    #: A rule with ``rewrite_Call``: its place among those (lower first; the first replacement
    #: wins), so a narrower rewrite of a call runs before a broader one.
    call_rank: ClassVar[int | None] = None
    #: Code the rule must not report.
    VALID: ClassVar[tuple[str, ...]] = ()
    #: Code the rule must report (and, when portable, the ported file).
    INVALID: ClassVar[tuple[Invalid, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register a rule (a class that sets ``code``); a second class with its code is refused."""
        super().__init_subclass__(**kwargs)
        code = cls.__dict__.get("code")
        if code is None:
            return  # a base shared by rules, not a rule
        taken = _registered.get(code)
        if taken is not None and (taken.__module__, taken.__qualname__) != (
            cls.__module__,
            cls.__qualname__,
        ):  # the same class again (a module reloaded) replaces itself
            raise DuplicateRuleError(
                f"{cls.__module__}.{cls.__qualname__} claims rule code {code}, which "
                f"{taken.__module__}.{taken.__qualname__} has; give it a new, never used code"
            )
        if "rewrite_Call" in cls.__dict__ and cls.call_rank is None:
            raise TypeError(
                f"{cls.__qualname__} ({code}) rewrites calls but has no call_rank: set it to "
                "its place among the rules that rewrite calls (see the others' call_rank)"
            )
        _registered[code] = cls

    def match_name(self, qualified: str) -> str | None:
        """For a dotted name like ``torch.cuda.synchronize``: the fix's ``attr`` if it is ours."""
        return None

    def __repr__(self) -> str:
        return f"<{self.code} {self.name}>"
