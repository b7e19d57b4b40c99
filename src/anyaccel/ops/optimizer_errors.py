"""The errors anyaccel's CPU optimizers raise for inputs they cannot take (nothing is changed).

Each derives from the built-in type ``torch.optim`` raises for the same input (``ValueError``
for a bad hyperparameter value, ``TypeError`` for a wrong kind of value or tensor,
``RuntimeError`` for a tensor the step cannot write), so code written against torch's
optimizers catches ours, and from anyaccel's ``OpError``, so one ``except`` catches them all.
"""

from __future__ import annotations

from anyaccel.ops.errors import OpError


class OptimizerInputError(OpError):
    """An input a CPU optimizer refused before writing anything (a ``RuntimeError`` as such)."""


class OptimizerValueError(OptimizerInputError, ValueError):
    """A value out of range (a negative learning rate, a beta of 1, a tensor of another shape)."""


class OptimizerTypeError(OptimizerInputError, TypeError):
    """A value of the wrong kind (a string learning rate, a float64 or sparse tensor)."""


class OptimizerIndexError(OptimizerValueError, IndexError):
    """A pair with one element (``betas=(0.9,)``), where torch raises ``IndexError``."""


def as_optimizer_error(exc: Exception, fix: str = "") -> Exception:
    """``exc`` (a built-in error from the kernel or torch) as ours, of the same built-in type.

    ``fix``, when given, is appended to the message: what to do about it.
    """
    if isinstance(exc, OptimizerInputError):
        return exc
    message = f"{exc}; {fix}" if fix else str(exc)
    if isinstance(exc, IndexError):
        return OptimizerIndexError(message)
    if isinstance(exc, ValueError):
        return OptimizerValueError(message)
    if isinstance(exc, TypeError):
        return OptimizerTypeError(message)
    if isinstance(exc, RuntimeError):
        return OptimizerInputError(message)
    return exc
