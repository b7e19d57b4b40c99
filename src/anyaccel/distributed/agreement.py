"""The ranks of a job agree on their collective backend before they wait for each other in it.

Ranks that chose different backends (``anyaccel_shm`` on one, gloo on another, because
``ANYACCEL_SHM_BACKEND`` differs between them) would each wait in ``init_process_group`` for
peers that never come, for the group's whole timeout, and then fail naming only store keys.
``agree_on_backend`` posts this rank's choice on the job's store, reads every rank's with a
short bounded wait, and raises naming the setting that differs and which rank has which value.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from anyaccel.distributed.errors import DistributedSetupError
from anyaccel.distributed.shm.backend import BACKEND_ENV

__all__ = ["AGREEMENT_WAIT_S", "BackendChoice", "agree_on_backend", "rank_list"]

logger = logging.getLogger(__name__)

#: How long a rank waits for the others' choices once it has joined the store (each posts
#: its own as soon as it joins, so this covers ranks that start later, on a loaded host or a
#: slow file system); past it the rank goes on without the check. Bounded by the group's
#: timeout too.
AGREEMENT_WAIT_S = 300.0


class BackendChoice(NamedTuple):
    """One rank's collective backend ("" when it refused its setting), why, and the setting
    that led to it (None: unset)."""

    backend: str
    reason: str
    setting: str | None


def rank_list(ranks: Sequence[int]) -> str:
    """``"rank 3"``, ``"ranks 0-2, 5"``: ranks named briefly, runs as ranges."""
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    return f"rank {text}" if len(ranks) == 1 else f"ranks {text}"


def _by_value(values: Sequence[Any]) -> str:
    """``"rank 0: a, ranks 1-3: b"``: which ranks hold each distinct value (in rank order)."""
    seen: dict[str, list[int]] = {}
    for rank, value in enumerate(values):
        seen.setdefault(str(value), []).append(rank)
    return ", ".join(f"{rank_list(ranks)}: {value}" for value, ranks in seen.items())


def _disagreement(choices: Sequence[BackendChoice]) -> str:
    """The error text for ranks whose backends differ."""
    backends = _by_value([f"{c.backend or 'none'} ({c.reason})" for c in choices])
    message = (
        f"the ranks chose different collective backends ({backends}), so they would wait for "
        "each other in init_process_group until its timeout. "
    )
    settings = [c.setting for c in choices]
    if len(set(settings)) > 1:
        values = _by_value(["unset" if s is None else repr(s) for s in settings])
        message += (
            f"{BACKEND_ENV} differs between ranks ({values}): set it to the same value on "
            "every rank, or unset it everywhere"
        )
    else:
        message += "Pass the same backend= and shm_backend= to init_distributed() on every rank"
    return message


def agree_on_backend(
    store: Any,
    rank: int,
    world_size: int,
    mine: BackendChoice,
    key: str,
    wait_s: float = AGREEMENT_WAIT_S,
) -> None:
    """Post ``mine`` under ``key`` on ``store`` and check it against every rank's.

    Raises :class:`DistributedSetupError` naming each rank's backend and setting when they
    differ. A rank whose choice does not arrive within ``wait_s`` seconds is logged and the
    check is skipped (it may still be starting; init_process_group waits for it as always).
    """
    try:
        store.set(f"{key}/{rank}", json.dumps(mine))
        deadline = time.monotonic() + wait_s
        missing = list(range(world_size))
        while True:
            missing = [r for r in missing if not store.check([f"{key}/{r}"])]
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if missing:
            logger.warning(
                "init_distributed: %s did not say which collective backend it chose within "
                "%g s; going on without checking that every rank chose %s",
                rank_list(missing), wait_s, mine.backend,
            )  # fmt: skip
            return
        choices = [
            BackendChoice(*json.loads(bytes(store.get(f"{key}/{r}")).decode()))
            for r in range(world_size)
        ]
    except (RuntimeError, OSError) as exc:  # the store's host went away (it failed first)
        raise DistributedSetupError(
            f"init_distributed: the job's store failed while the ranks compared their "
            f"collective backends ({str(exc).splitlines()[0] if str(exc) else exc!r}); the "
            "rank hosting it (rank 0) most likely stopped first: see its error"
        ) from exc
    if len({c.backend for c in choices}) == 1:
        return
    # Every rank raises; each waits until all have read the choices, so that the store's host
    # (rank 0) stays until none needs it. The host may leave once it has seen every rank's read.
    try:
        store.add(f"{key}/read", 1)
        while int(store.add(f"{key}/read", 0)) < world_size and time.monotonic() < deadline:
            time.sleep(0.01)
    except (RuntimeError, OSError):
        pass  # the host left after every rank had read: nothing is missing
    raise DistributedSetupError(_disagreement(choices))
