"""The errors anyaccel's CPU optimizers raise for inputs they cannot take (nothing is changed).

Each derives from the built-in type ``torch.optim`` raises for the same input (``ValueError``
for a bad hyperparameter value, ``TypeError`` for a wrong kind of value or tensor,
``RuntimeError`` for a tensor the step cannot write), so code written against torch's
optimizers catches ours, and from :class:`OptimizerInputError` (an ``AnyaccelError``), so one
``except`` catches them all. A bad learning rate is not a ``RuntimeError``: only the inputs
torch refuses as ``RuntimeError`` are.
"""

from __future__ import annotations

from anyaccel.errors import AnyaccelError


class OptimizerInputError(AnyaccelError):
    """An input a CPU optimizer refused before writing anything."""


class OptimizerRuntimeError(OptimizerInputError, RuntimeError):
    """A tensor the step cannot write (meta or complex parameters, an expanded parameter)."""


class OptimizerValueError(OptimizerInputError, ValueError):
    """A value out of range (a negative learning rate, a beta of 1, a tensor of another shape)."""


class OptimizerTypeError(OptimizerInputError, TypeError):
    """A value of the wrong kind (a string learning rate, a float64 or sparse tensor)."""


class OptimizerValueRuntimeError(OptimizerValueError, OptimizerRuntimeError):
    """A value torch refuses as a ``RuntimeError`` (``fused`` with ``foreach``, a tensor beta of
    several elements) and anyaccel has refused as a ``ValueError``: both, so either catches it."""


class OptimizerTypeRuntimeError(OptimizerTypeError, OptimizerRuntimeError):
    """A tensor of a kind the step cannot take (meta, complex, a sparse gradient): torch's
    fused optimizers raise ``RuntimeError``, anyaccel has raised ``TypeError``: both."""


class OptimizerIndexError(OptimizerValueError, IndexError):
    """A pair with one element (``betas=(0.9,)``), where torch raises ``IndexError``."""


def as_optimizer_error(exc: Exception, fix: str = "", *, from_kernel: bool = False) -> Exception:
    """``exc`` (a built-in error from the kernel or torch) as ours, of the same built-in type.

    ``fix``, when given, is appended to the message: what to do about it. The kernel's
    ``TypeError``s refuse tensors torch's fused step refuses with ``RuntimeError``
    (``from_kernel``): they become both.
    """
    if isinstance(exc, OptimizerInputError):
        return exc
    message = f"{exc}; {fix}" if fix else str(exc)
    if isinstance(exc, IndexError):
        return OptimizerIndexError(message)
    if isinstance(exc, ValueError):
        return OptimizerValueError(message)
    if isinstance(exc, TypeError):
        return OptimizerTypeRuntimeError(message) if from_kernel else OptimizerTypeError(message)
    if isinstance(exc, RuntimeError):
        return OptimizerRuntimeError(message)
    return exc
