"""What the conformance kit reports: each check's verdict, one report per accelerator."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "NO_DEVICE",
    "CheckResult",
    "ConformanceReport",
    "describe_exception",
    "safe_repr",
]

#: How the skip reason of a device check begins when the accelerator has no device.
NO_DEVICE = "no device was exercised"


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict: ``"passed"``, ``"failed"`` or ``"skipped"``, and why."""

    name: str
    status: str
    messages: tuple[str, ...] = ()
    seconds: float = 0.0


@dataclass(frozen=True)
class ConformanceReport:
    """Every check's verdict for one accelerator."""

    target: str
    accelerator: str
    results: tuple[CheckResult, ...] = field(default_factory=tuple)

    @property
    def no_device(self) -> str | None:
        """Why no device was exercised (the device checks were skipped), or ``None``."""
        for result in self.results:
            first = result.messages[0] if result.messages else ""
            if result.status == "skipped" and first.startswith(NO_DEVICE):
                return first
        return None

    @property
    def passed(self) -> bool:
        """Whether no check failed (skipped checks do not count against it)."""
        return not self.failures

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        """The checks that failed."""
        return tuple(r for r in self.results if r.status == "failed")

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data, for JSON."""
        return {**asdict(self), "passed": self.passed, "no_device": self.no_device}

    def format(self) -> str:
        """The report as text: one line per check, failures and skip reasons indented below."""
        lines = [f"conformance of {self.target} (accelerator {self.accelerator!r})"]
        if self.no_device is not None:
            lines.append(f"NO DEVICE: {self.no_device}")
        width = max((len(r.name) for r in self.results), default=0)
        for result in self.results:
            lines.append(f"  {result.status.upper():<7} {result.name:<{width}}")
            lines.extend(f"          - {message}" for message in result.messages)
        counts = {s: sum(r.status == s for r in self.results) for s in ("passed", "failed")}
        skipped = len(self.results) - counts["passed"] - counts["failed"]
        lines.append(f"{counts['passed']} passed, {counts['failed']} failed, {skipped} skipped")
        return "\n".join(lines)


def safe_repr(value: object) -> str:
    """``repr(value)``, or a note that the target's ``__repr__`` raised (never an exception)."""
    try:
        return repr(value)
    except Exception as error:
        return f"<{type(value).__name__}: __repr__ raised {type(error).__name__}: {error}>"


def describe_exception(error: BaseException, what: str) -> str:
    """``error`` as a report line: its type and message, or the exit status of ``sys.exit``."""
    if isinstance(error, SystemExit):
        return f"{what} called sys.exit({error.code!r})"
    return f"{what} raised {type(error).__name__}: {error}"
