"""Base-class state an accelerator declares once and each instance makes for itself.

DeepSpeed's accelerators set ``self._name`` and friends in ``__init__`` and often never call
``super().__init__()``, so a base class cannot rely on its ``__init__`` to make its state. A class
attribute declared as an :class:`InstanceDefault` is made from ``factory(instance)`` once
construction is over instead; :class:`DeclaresInstanceDefaults` (the base of
``anyaccel.Accelerator``) does the bookkeeping, and pickling and copying follow the declarations.

The doors for other modules: :func:`instance_defaults` (what a class declares),
:func:`settle` (make what an object still lacks, at hand-over) and :func:`value_before_init`
(what an instance would read without its ``__init__``, asked of the class).
"""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, overload

__all__ = [
    "DeclaresInstanceDefaults",
    "InstanceDefault",
    "instance_defaults",
    "settle",
    "value_before_init",
]

_T = TypeVar("_T")
_D = TypeVar("_D", bound="DeclaresInstanceDefaults")


class InstanceDefault(Generic[_T]):
    """Declares base-class state made from ``factory(instance)`` once construction is over.

    A class attribute of an ``anyaccel.Accelerator`` subclass declared as one of these is not
    left on the class: after the outermost ``__init__`` returns, a value the instance does not
    have yet is made from it (so names the subclass set, before or after
    ``super().__init__()``, count, and a value it assigned is kept); :func:`settle` and
    unpickling make what is still missing. No descriptor stays behind, so reads of the
    attribute are plain instance reads that CPython specialises. ``per_process=True`` marks
    state that does not travel by pickle (a device module): the receiving process makes its own.
    """

    def __init__(self, factory: Callable[[Any], _T], *, per_process: bool = False) -> None:
        self.factory = factory
        #: Made afresh in each process: left out when the accelerator is pickled.
        self.per_process = per_process

    def __set_name__(self, owner: type[Any], name: str) -> None:
        if not issubclass(owner, DeclaresInstanceDefaults):
            raise TypeError(
                f"{owner.__qualname__}.{name} is an InstanceDefault, which only an "
                "anyaccel.Accelerator subclass can declare; assign the value in __init__ instead"
            )

    if TYPE_CHECKING:  # for the type checker, reading the declared attribute gives its value

        @overload
        def __get__(
            self, instance: None, owner: type[Any] | None = None
        ) -> InstanceDefault[_T]: ...

        @overload
        def __get__(self, instance: object, owner: type[Any] | None = None) -> _T: ...

        def __get__(
            self, instance: object | None, owner: type[Any] | None = None
        ) -> _T | InstanceDefault[_T]: ...


#: Per thread: how deep each instance (by id) is in wrapped ``__init__`` calls now.
_init_depths = threading.local()


def _own_values(instance: object) -> dict[str, Any]:
    """``instance.__dict__``, made a plain dict of its own so its attribute reads stay fast.

    CPython 3.11 and 3.12 keep an instance's attributes inline and specialise reads of them;
    once ``__dict__`` is asked for, the dict they get shares those inline values, and reads of
    every attribute of that instance go the slow, unspecialised way (about 2x a contract
    call). A fresh dict holding the same items is read through the specialised dict path.
    """
    values: dict[str, Any] = dict(vars(instance))
    instance.__dict__ = values
    return values


def _make_missing(
    instance: object, defaults: Mapping[str, InstanceDefault[Any]], *, strict: bool = True
) -> None:
    """Give ``instance`` each declared default it has no value for yet, in declaration order.

    With ``strict=False`` a factory that raises is left for later (the instance's names may
    not be set yet); otherwise its exception propagates.
    """
    values = _own_values(instance)
    for name, default in defaults.items():
        if name not in values:
            try:
                values[name] = default.factory(instance)
            except Exception:
                if strict:
                    raise


def _defaults_of(cls: type[Any]) -> dict[str, InstanceDefault[Any]]:
    """The ``InstanceDefault`` declarations ``cls`` inherits or makes, as lookup would find them.

    A name's first class in the MRO decides: its own declaration wins, and a plain class
    attribute there (``_communication_backend_name = "hccl"``) means no default at all.
    """
    names: dict[str, None] = {}
    for klass in reversed(cls.__mro__):
        names.update(dict.fromkeys(vars(klass).get("_declared_defaults", {})))
    found: dict[str, InstanceDefault[Any]] = {}
    for name in names:
        for klass in cls.__mro__:
            declared: dict[str, InstanceDefault[Any]] = vars(klass).get("_declared_defaults", {})
            if name in declared:
                found[name] = declared[name]
                break
            if name in vars(klass):
                break
    return found


#: Attribute marking an ``__init__`` already wrapped by :func:`_completing_init`.
_WRAPPED = "__anyaccel_completes__"


def _completing_init(
    init: Callable[..., None], owner: type[DeclaresInstanceDefaults]
) -> Callable[..., None]:
    """``init``, after which the instance gets the declared state it lacks.

    After the outermost call (counted per instance and thread) a factory's error propagates;
    after an inner one (``super().__init__()``) what cannot be made yet waits, since the
    subclass may set the names it needs after that call returns.
    """

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        depths: dict[int, int] | None = getattr(_init_depths, "depths", None)
        if depths is None:
            depths = _init_depths.depths = {}
        key = id(self)
        depth = depths.get(key, 0)
        depths[key] = depth + 1
        try:
            init(self, *args, **kwargs)
        finally:
            if depth:
                depths[key] = depth
            else:
                del depths[key]
        cls = type(self)
        if DeclaresInstanceDefaults in cls.__mro__:
            defaults = cls._instance_defaults
        else:  # an __init__ borrowed by a class of its own: names it has are its own
            defaults = {
                name: default
                for name, default in owner._instance_defaults.items()
                if not hasattr(cls, name)
            }
        _make_missing(self, defaults, strict=not depth)

    setattr(__init__, _WRAPPED, init)
    return __init__


class DeclaresInstanceDefaults:
    """A class whose :class:`InstanceDefault` declarations each instance makes for itself.

    Declarations leave the class namespace; ``__init__`` (the class's own or an inherited one)
    is wrapped to make them when construction is over; pickling leaves out per-process state
    and unpickling makes it again; copies share per-process state.
    """

    #: Base-class state declared with :class:`InstanceDefault`, by attribute name, as this
    #: class resolves it (set for each subclass; the declarations leave the class namespace).
    _instance_defaults: ClassVar[Mapping[str, InstanceDefault[Any]]] = {}
    #: The declarations this class itself made (``_instance_defaults`` merges them down the MRO).
    _declared_defaults: ClassVar[Mapping[str, InstanceDefault[Any]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Move ``InstanceDefault`` declarations off the class; make ``__init__`` complete them."""
        super().__init_subclass__(**kwargs)
        declared = {
            name: value for name, value in vars(cls).items() if isinstance(value, InstanceDefault)
        }
        for name in declared:
            delattr(cls, name)
        cls._declared_defaults = declared
        cls._instance_defaults = _defaults_of(cls)
        init = vars(cls).get("__init__", cls.__init__)
        if cls._instance_defaults and not hasattr(init, _WRAPPED):
            cls.__init__ = _completing_init(init, cls)  # type: ignore[method-assign]

    def _settle(self) -> None:
        """Make any declared base-class state not made yet; raises what a missing runtime raises.

        ``set_accelerator``, plugin construction and the conformance kit call it (through
        :func:`settle`) when an accelerator is handed over, so a problem shows there and not at
        a later call (it matters for objects whose ``__init__`` never ran, such as
        ``cls.__new__(cls)``). A subclass that loads more at hand-over extends it.
        """
        _make_missing(self, type(self)._instance_defaults)

    def __getstate__(self) -> dict[str, Any]:
        """The instance's state without what each process makes for itself (device modules)."""
        defaults = type(self)._instance_defaults
        return {
            name: value
            for name, value in _own_values(self).items()
            if not (name in defaults and defaults[name].per_process)
        }

    def __copy__(self: _D) -> _D:
        """A shallow copy in this process: it shares the device module and every other value."""
        duplicate = type(self).__new__(type(self))
        _own_values(duplicate).update(_own_values(self))
        return duplicate

    def __deepcopy__(self: _D, memo: dict[int, Any]) -> _D:
        """A deep copy in this process: per-process state (the device module) is shared."""
        duplicate = type(self).__new__(type(self))
        memo[id(self)] = duplicate
        defaults = type(self)._instance_defaults
        values = _own_values(duplicate)
        for name, value in _own_values(self).items():
            shared = name in defaults and defaults[name].per_process
            values[name] = value if shared else copy.deepcopy(value, memo)
        return duplicate

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore pickled state, then make what each process makes itself (its device module)."""
        _own_values(self).update(state)
        self._settle()


def instance_defaults(cls: type[Any]) -> Mapping[str, InstanceDefault[Any]]:
    """The :class:`InstanceDefault` declarations ``cls`` resolves, by attribute name.

    Empty for a class that declares none, or that does not derive from
    :class:`DeclaresInstanceDefaults` (a DeepSpeed accelerator registered as a virtual subclass).
    """
    if not (isinstance(cls, type) and issubclass(cls, DeclaresInstanceDefaults)):
        return {}
    return cls._instance_defaults


def settle(obj: object) -> None:
    """Make the declared state ``obj`` does not have yet: what hand-over does to an accelerator.

    Runs ``obj._settle()`` (a subclass may extend it, e.g. to load its device module now);
    an object without one (a DeepSpeed accelerator, a duck-typed object) has nothing to make.
    Raises whatever a factory raises, such as a missing runtime's error.
    """
    hook = getattr(obj, "_settle", None)
    if callable(hook):
        hook()


def value_before_init(cls: type[object], name: str) -> Any:
    """What attribute ``name`` of a ``cls`` instance reads when its ``__init__`` has not run.

    A declared default is made for a bare instance (``cls.__new__(cls)``, nothing set), so its
    factory sees the class's own names only; an undeclared name is the class attribute. Lets a
    caller ask a backend class what it would use (its collectives backend, say) without the
    cost or the side effects of creating it. Raises ``AttributeError`` when ``cls`` has
    neither, and whatever the factory raises.
    """
    declared = instance_defaults(cls).get(name)
    if declared is None:
        return getattr(cls, name)
    return declared.factory(cls.__new__(cls))
