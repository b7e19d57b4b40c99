"""Which accelerator this process uses, and the trace of why.

The cascade probes the registry's candidates (:mod:`anyaccel.registry`) in priority order and
makes the first available one; ``DS_ACCELERATOR`` forces a registered name and is never used
as a module path. The choice is made once and cached; :class:`DetectionReport` keeps the
trace. Probes look for devices without creating a device context, so a process that detects
its accelerator can still fork.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings

from anyaccel.abstract import Accelerator
from anyaccel.contract import (
    OPTIONAL_MEMBERS,
    REQUIRED_MEMBERS,
    check_accelerator,
    missing_members,
    validated,
)
from anyaccel.errors import (
    AcceleratorError,
    AcceleratorUnavailableError,
    CpuFallbackWarning,
    InvalidAcceleratorError,
    InvalidSettingError,
    UnknownAcceleratorError,
)
from anyaccel.forksafe import ForkSafeLock
from anyaccel.guard import probe_timeout, refuse_reentry, run_guarded
from anyaccel.instance_defaults import settle
from anyaccel.plugins import (
    PluginWarning,
    adapters_declared,
    claimed_builtin_name,
    name_claim_message,
    plugin_name_problem,
)
from anyaccel.probe import (
    ALLOW_ENV,
    FORCE_ENV,
    BackendCandidate,
    Decision,
    DetectionReport,
    HowChosen,
    PluginState,
    PluginStatus,
    ProbeKind,
    ProbeOutcome,
    ProbeRecord,
    forced_name,
    package_installed,
    resolve,
)
from anyaccel.registry import (
    BUILTIN_CANDIDATES,
    SUPPORTED_ACCELERATOR_LIST,
    builtin_names,
    forget_plugins,
    mark_plugin_failed,
    plugin_statuses,
    register_backend,
    registered_backends,
    unregister_backend,
)
from anyaccel.settings import LAUNCHERS

__all__ = [
    "FORCE_ENV",
    "OPTIONAL_MEMBERS",
    "REQUIRED_MEMBERS",
    "SUPPORTED_ACCELERATOR_LIST",
    "BackendCandidate",
    "DetectionReport",
    "ProbeOutcome",
    "ProbeRecord",
    "detect_accelerator",
    "detection_report",
    "forced_name",
    "get_accelerator",
    "is_current_accelerator_supported",
    "package_installed",
    "register_backend",
    "registered_backends",
    "reset_accelerator",
    "set_accelerator",
    "unregister_backend",
]

logger = logging.getLogger("anyaccel.detection")


# Old private names, kept for code that reached for them.
_BUILTIN_CANDIDATES = BUILTIN_CANDIDATES
_missing_members = missing_members
_validated = validated


def _plugin_rows(looked_for: bool) -> tuple[PluginStatus, ...]:
    return plugin_statuses() if looked_for else ()


# ---------------------------------------------------------------------- the cascade
def _what(candidate: BackendCandidate, step: str) -> str:
    """Who runs ``step`` (``probe``/``constructor``), as the guard and errors name it."""
    if candidate.is_builtin:
        return f"the {candidate.path} {step}"
    return f"plugin {candidate.name!r} ({candidate.origin}) {step}"


def _checked_outcome(candidate: BackendCandidate) -> ProbeOutcome:
    outcome = resolve(candidate.probe)()
    if not isinstance(outcome, ProbeOutcome):
        raise TypeError(f"probe returned {type(outcome).__name__}, not ProbeOutcome")
    return outcome


def _remedy(candidate: BackendCandidate) -> str:
    if candidate.is_builtin:
        return (
            f"Check the {candidate.name!r} runtime installation; `anyaccel report` shows the trace."
        )
    return (
        f"Report this to the maintainers of {candidate.origin}, upgrade or uninstall it, or "
        f"leave it out of {ALLOW_ENV}."
    )


def _plugin_failed(candidate: BackendCandidate, state: PluginState, detail: str) -> None:
    """Warn about a plugin passed over in detection, and record it in its status row."""
    mark_plugin_failed(candidate.name, candidate.origin, state, detail)
    warnings.warn(f"{detail}; passing over it", PluginWarning, stacklevel=5)


def _is_builtin_row(candidate: BackendCandidate) -> bool:
    """Whether ``candidate`` is one of anyaccel's own rows (not a plugin's, not registered)."""
    return any(candidate is row for row in BUILTIN_CANDIDATES)


def _absent(candidate: BackendCandidate) -> tuple[ProbeOutcome, float] | None:
    """A built-in row's runtime found plainly absent without the guard, or ``None``.

    The row's class answers ``runtime_absent()`` from torch's build flags and ``find_spec``
    alone (anyaccel's code, no vendor code), so a machine without a vendor's runtime starts no
    guarded thread for it. Anything unexpected leaves the answer to the guarded probe.
    """
    if not _is_builtin_row(candidate):
        return None  # plugins and registered rows: their own probe, behind the guard
    start = time.perf_counter()
    try:
        absent = getattr(resolve(candidate.accelerator), "runtime_absent", None)
        reason = absent() if absent is not None else None
    except Exception:  # the guarded probe meets it again and says what
        return None
    if not isinstance(reason, str):
        return None
    return ProbeOutcome.not_installed(reason, ""), time.perf_counter() - start


def _probe(candidate: BackendCandidate, timeout: float | None) -> tuple[ProbeOutcome, float]:
    """Run the candidate's probe behind the guard: whatever it does, an outcome comes back."""
    label = _what(candidate, "probe")
    result = run_guarded(label, lambda: _checked_outcome(candidate), timeout)
    if result.ok and result.value is not None:
        return result.value, result.seconds
    if candidate.is_builtin and isinstance(result.error, InvalidSettingError):
        raise result.error  # a bad setting of ours is the user's to fix, not a broken runtime
    problem = f"{label} {result.problem()}"
    if not candidate.is_builtin:
        _plugin_failed(candidate, PluginState.BROKEN, problem)
    return ProbeOutcome.broken(problem, _remedy(candidate)), result.seconds


def _constructed(candidate: BackendCandidate) -> Accelerator:
    accelerator = _validated(
        resolve(candidate.accelerator)(), check_signatures=not candidate.is_builtin
    )
    if not candidate.is_builtin:
        claim = claimed_builtin_name(accelerator, builtin_names(), candidate.name)
        if claim is not None:
            raise _NameClaimed(name_claim_message(candidate.name, candidate.origin, claim))
    return accelerator


class _NameClaimed(AcceleratorError):
    """A plugin's accelerator reports a built-in backend's name."""


def _instantiate(
    candidate: BackendCandidate, found: ProbeOutcome, timeout: float | None
) -> Accelerator | ProbeOutcome:
    """The accelerator, or the ``broken`` outcome saying why it could not be made."""
    what = _what(candidate, "constructor")
    if timeout is not None and candidate.creation_seconds is not None:
        timeout = max(timeout, candidate.creation_seconds)  # it may compile on first use
    result = run_guarded(what, lambda: _constructed(candidate), timeout)
    if result.ok and result.value is not None:
        return result.value
    if isinstance(result.error, _NameClaimed) and not result.reentered:
        detail = str(result.error)
        _plugin_failed(candidate, PluginState.REJECTED, detail)
        return ProbeOutcome.broken(f"rejected: {detail}", _remedy(candidate))
    problem = result.problem()
    if not candidate.is_builtin:
        _plugin_failed(candidate, PluginState.BROKEN, f"{what} {problem}")
    return ProbeOutcome.broken(
        f"{found.reason}, but creating the accelerator {problem}", _remedy(candidate)
    )


def _record(
    candidate: BackendCandidate, outcome: ProbeOutcome, seconds: float, decision: Decision
) -> ProbeRecord:
    return ProbeRecord(
        candidate.path,
        candidate.name,
        candidate.priority,
        outcome.kind,
        outcome.reason,
        decision,
        seconds,
        outcome.device_count,
    )


def _not_probed(candidate: BackendCandidate) -> ProbeRecord:
    return ProbeRecord(
        candidate.path,
        candidate.name,
        candidate.priority,
        ProbeKind.NOT_PROBED,
        "an earlier candidate was selected",
        Decision.NOT_PROBED,
        0.0,
    )


_SEVERITY = {ProbeKind.NOT_INSTALLED: 0, ProbeKind.BROKEN: 1, ProbeKind.NO_DEVICE: 2}


def detect_accelerator(*, probe_all: bool = False) -> tuple[Accelerator, DetectionReport]:
    """Run the cascade (or honour ``DS_ACCELERATOR``) and return a new accelerator and its trace.

    This does not touch the cached choice; ``get_accelerator`` does. With ``probe_all``, the
    candidates after the chosen one are probed too, so the trace shows everything present.
    Raises as :func:`get_accelerator` does, and ``InvalidSettingError`` for a bad
    ``ANYACCEL_PROBE_TIMEOUT``.
    """
    refuse_reentry("detect_accelerator")
    start = time.perf_counter()
    forced = forced_name()
    # A built-in name forced: no plugin is discovered, imported or probed, unless a DeepSpeed
    # adapter is installed (it may provide that very name).
    include_plugins = forced not in builtin_names() or adapters_declared()
    candidates = registered_backends(include_plugins=include_plugins)
    if forced is not None:
        candidates = tuple(c for c in candidates if c.name == forced)
        if not candidates:
            raise UnknownAcceleratorError(forced, list(SUPPORTED_ACCELERATOR_LIST), FORCE_ENV)

    timeout = probe_timeout()
    records: list[ProbeRecord] = []
    chosen: Accelerator | None = None
    chosen_candidate: BackendCandidate | None = None
    failures: list[tuple[BackendCandidate, ProbeOutcome]] = []
    for candidate in candidates:
        if chosen is not None and not probe_all:
            records.append(_not_probed(candidate))
            continue
        # Forced, the probe itself runs: its outcome carries the remedy the error quotes.
        absent = _absent(candidate) if forced is None else None
        outcome, seconds = absent if absent is not None else _probe(candidate, timeout)
        if not outcome.available:
            failures.append((candidate, outcome))
            records.append(_record(candidate, outcome, seconds, Decision.PASSED_OVER))
            continue
        if chosen is not None:
            records.append(_record(candidate, outcome, seconds, Decision.LOWER_PRIORITY))
            continue
        made = _instantiate(candidate, outcome, timeout)
        if isinstance(made, ProbeOutcome):
            failures.append((candidate, made))
            records.append(_record(candidate, made, seconds, Decision.PASSED_OVER))
            continue
        chosen, chosen_candidate = made, candidate
        records.append(_record(candidate, outcome, seconds, Decision.SELECTED))

    elapsed = time.perf_counter() - start
    for record in records:
        logger.debug(
            "probe %s: %s (%s) -> %s [%.3f ms]",
            record.candidate,
            record.kind,
            record.reason,
            record.decision,
            record.seconds * 1000,
        )
    broken_plugins = [
        (c, o) for c, o in failures if not c.is_builtin and o.kind == ProbeKind.BROKEN
    ]
    if forced is not None and broken_plugins:
        # Forced by name, a failed plugin is never replaced by another backend of that name.
        candidate, outcome = broken_plugins[0]
        raise AcceleratorUnavailableError(
            forced,
            outcome.kind,
            f"{candidate.path}: {outcome.reason}",
            f"{outcome.remedy} Or unset {FORCE_ENV}.",
        )
    if chosen is None or chosen_candidate is None:
        if forced is None:
            raise AcceleratorError(
                "no accelerator candidate is available, not even the CPU fallback: "
                + "; ".join(f"{c.path}: {o.reason}" for c, o in failures)
            )
        candidate, outcome = max(failures, key=lambda f: _SEVERITY.get(f[1].kind, 1))
        reasons = "; ".join(f"{c.path}: {o.reason}" for c, o in failures)
        raise AcceleratorUnavailableError(
            forced, outcome.kind, reasons, f"{outcome.remedy} Or unset {FORCE_ENV}."
        )

    stands_in_for = tuple(
        f"plugin {c.name!r} ({c.origin}), which failed: {o.reason}" for c, o in broken_plugins
    )
    for failed in stands_in_for:
        warnings.warn(
            f"anyaccel is using {chosen._name!r} ({chosen_candidate.path}) in place of {failed}; "
            f"fix the plugin, or set {FORCE_ENV} to choose a backend",
            PluginWarning,
            stacklevel=3,
        )
    if stands_in_for:
        records = [
            r.replace(reason=f"{r.reason} (stands in for the failed plugin(s) above)")
            if r.decision == Decision.SELECTED
            else r
            for r in records
        ]
    report = DetectionReport(
        accelerator=chosen._name,
        accelerator_class=f"{type(chosen).__module__}.{type(chosen).__qualname__}",
        how=HowChosen.DETECTED if forced is None else HowChosen.FORCED,
        forced_name=forced,
        probes=tuple(records),
        seconds=elapsed,
        plugins=_plugin_rows(include_plugins),
        stands_in_for=stands_in_for,
    )
    logger.debug("selected accelerator %r in %.3f ms", chosen._name, elapsed * 1000)
    return chosen, report


# ---------------------------------------------------------------------- the cached choice
#: The accelerator and its report, set together so no reader sees one without the other.
_choice: tuple[Accelerator, DetectionReport] | None = None
#: The accelerator alone, for ``get_accelerator``'s one-read fast path.
_accelerator: Accelerator | None = None
_lock = ForkSafeLock()  # a child forked mid-detection gets it unheld and detects on its own


def get_accelerator() -> Accelerator:
    """The process's accelerator: detected on first use, then the same object every time.

    Raises :class:`~anyaccel.errors.UnknownAcceleratorError` if ``DS_ACCELERATOR`` names no
    registered backend and :class:`~anyaccel.errors.AcceleratorUnavailableError` if the one
    it names cannot run here (a failed detection is not cached);
    :class:`~anyaccel.errors.InvalidSettingError` when a setting a built-in backend reads is
    bad (``ANYACCEL_EMULATED='npu:two'``); :class:`~anyaccel.errors.ReentrantDetectionError`
    when called from code that runs inside detection (a plugin's import, probe or constructor).
    Warns :class:`~anyaccel.errors.CpuFallbackWarning` when detection falls back to the CPU
    and ``anyaccel.plugins.PluginWarning`` for each plugin passed over. Safe from any thread:
    threads that ask while another detects wait for it and get the same object.
    """
    return _accelerator or _detect_once("get_accelerator")[0]  # one global read once detected


def _detect_once(api: str) -> tuple[Accelerator, DetectionReport]:
    global _accelerator, _choice
    refuse_reentry(api)  # from a plugin's probe, waiting for the lock would deadlock
    with _lock:
        choice = _choice
        if choice is None:
            accelerator, report = detect_accelerator()
            if report.how == HowChosen.DETECTED and report.accelerator == "cpu":
                _warn_cpu_fallback()
            choice = _choice = (accelerator, report)
            _accelerator = accelerator
        return choice


#: Rank variables launchers set (torchrun, Open MPI, Intel MPI/MPICH, Slurm), job-wide then
#: per node: the CPU fallback is reported by the job's first process only.
_RANK_VARIABLES = tuple(launcher.rank for launcher in LAUNCHERS)
_LOCAL_RANK_VARIABLES = tuple(launcher.local_rank for launcher in LAUNCHERS)


def _first_process_of_job() -> bool:
    """Whether this process is rank 0 (or local rank 0 when only that is known, or unlaunched)."""
    for names in (_RANK_VARIABLES, _LOCAL_RANK_VARIABLES):
        for name in names:
            value = os.environ.get(name, "").strip()
            if value:
                return not value.isdigit() or int(value) == 0  # a garbled rank still warns
    return True


def _warn_cpu_fallback() -> None:
    """One short line, from the job's first process: what was chosen and how to silence it."""
    if not _first_process_of_job():
        return
    warnings.warn(
        f"anyaccel found no accelerator and uses the CPU; set {FORCE_ENV}=cpu to choose it "
        "and silence this, or run `anyaccel report` to see why each backend was passed over",
        CpuFallbackWarning,
        stacklevel=_caller_stacklevel(),
    )


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that names the first caller outside anyaccel (the user's line).

    Detection runs under whichever anyaccel helper asked first (``get_accelerator()``,
    ``ddp_device_ids()``...), so a fixed level would point inside the package.
    """
    frame = sys._getframe(1)  # the caller of this function is level 1 of warnings.warn
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def set_accelerator(accel_obj: object) -> None:
    """Make ``accel_obj`` the process's accelerator.

    Raises :class:`~anyaccel.errors.InvalidAcceleratorError` (a ``TypeError``) naming every
    contract member that is missing or not callable as the ABC declares it, or the built-in
    name a plugin's accelerator claims; nothing is changed (not even ``accel_obj``) then.
    """
    global _accelerator, _choice
    refuse_reentry("set_accelerator")
    check_accelerator(accel_obj)
    if isinstance(accel_obj, Accelerator):
        settle(accel_obj)  # the state it should have had, made to judge it
    problem = plugin_name_problem(accel_obj, builtin_names())
    if problem is not None:  # the verdict detection gives the same plugin
        raise InvalidAcceleratorError(problem)
    accelerator = _validated(accel_obj)  # adopts a duck-typed object only now it is accepted
    report = DetectionReport(
        accelerator=accelerator._name,
        accelerator_class=f"{type(accelerator).__module__}.{type(accelerator).__qualname__}",
        how=HowChosen.SET,
        forced_name=None,
    )
    with _lock:
        _choice = (accelerator, report)
        _accelerator = accelerator


def reset_accelerator() -> None:
    """Forget the cached accelerator so the next ``get_accelerator`` detects again (for tests).

    Detection then sees what this process has: emulated devices an ``install()`` made stay
    installed (torch names PrivateUse1 once per process, and ``torch.accelerator`` reports
    them), so they are chosen again unless ``DS_ACCELERATOR`` names another backend.
    """
    global _accelerator, _choice
    refuse_reentry("reset_accelerator")
    with _lock:
        _accelerator = None
        _choice = None
        forget_plugins()


def detection_report() -> DetectionReport:
    """How the current accelerator was chosen (detecting it first if nothing has yet)."""
    choice = _choice
    return choice[1] if choice is not None else _detect_once("detection_report")[1]


def is_current_accelerator_supported() -> bool:
    """Whether the current accelerator's name is one ``DS_ACCELERATOR`` accepts."""
    name = get_accelerator()._name
    return name in builtin_names() or name in SUPPORTED_ACCELERATOR_LIST
