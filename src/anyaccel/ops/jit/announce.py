"""Build announcements: INFO on the ``anyaccel.ops`` logger, on stderr while logging is unset."""

from __future__ import annotations

import logging
import sys

#: Builds are announced here (INFO) and cache repairs warned about (WARNING).
logger = logging.getLogger("anyaccel.ops")


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time (as logging's handler of last resort)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


_default_handler = _StderrHandler()
_default_handler.setFormatter(logging.Formatter("[anyaccel] %(message)s"))


def _logging_unconfigured() -> bool:
    """Whether neither the application nor the user has configured logging for anyaccel."""
    root = logging.getLogger()
    chain = (logging.getLogger("anyaccel"), logger)
    return (
        not root.handlers
        and root.level <= logging.WARNING
        and logging.root.manager.disable < logging.INFO
        and all(node.level == logging.NOTSET and not node.handlers for node in chain)
    )


def announce(message: str) -> None:
    """Log ``message`` at INFO on ``anyaccel.ops``, shown on stderr while logging is unconfigured.

    Builds take seconds to minutes, so users see them by default; once logging is configured
    the usual rules apply (``logging.getLogger("anyaccel").setLevel(logging.WARNING)`` silences).
    """
    if _logging_unconfigured():
        _default_handler.handle(
            logger.makeRecord(logger.name, logging.INFO, __file__, 0, message, (), None)
        )
    else:
        logger.info(message)
