"""Which devices a node's processes see and use.

``assign_visible_devices`` writes a launcher's per-node assignment into an environment;
``select_device_index`` picks the device of one local rank, refusing to let ranks share one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import MutableMapping, Sequence
from typing import TYPE_CHECKING

from anyaccel.distributed.environment import LaunchInfo
from anyaccel.distributed.errors import DistributedSetupError

if TYPE_CHECKING:
    from anyaccel.abstract import Accelerator

__all__ = ["assign_visible_devices", "select_device_index"]

logger = logging.getLogger(__name__)


def _device_ids(device_ids: object) -> list[int]:
    """``device_ids`` as a list of distinct non-negative ints, or ``TypeError``/``ValueError``."""
    if isinstance(device_ids, (str, bytes)) or not isinstance(device_ids, Sequence):
        raise TypeError(
            f"device ids must be a list of integers, not {type(device_ids).__name__} "
            f"{device_ids!r} (a string such as '12' is ambiguous: write [1, 2] or [12])"
        )
    bad = [d for d in device_ids if not isinstance(d, int) or isinstance(d, bool)]
    if bad:
        raise TypeError(f"device ids must be integers; got {bad!r} in {list(device_ids)!r}")
    ids = [int(d) for d in device_ids]
    negative = [d for d in ids if d < 0]
    if negative:
        raise ValueError(f"device ids must be >= 0; got {negative} in {ids}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"device ids {ids} repeat a device; each device is listed once")
    return ids


def assign_visible_devices(
    env: MutableMapping[str, str],
    device_ids: Sequence[int],
    accelerator: Accelerator | None = None,
) -> dict[str, str]:
    """Show a node's processes ``device_ids`` by writing the accelerator's visible-devices vars.

    Writes through the contract's ``set_visible_devices_envs`` and returns what changed. Only
    integer ids are taken (``TypeError`` otherwise); an empty assignment leaves ``env`` as it
    is (blanking the variable would hide every device) and logs why.
    """
    ids = _device_ids(device_ids)
    if accelerator is None:
        from anyaccel.detection import get_accelerator

        accelerator = get_accelerator()
    if not ids:
        logger.info(
            "no devices assigned: leaving %s unchanged",
            ", ".join(accelerator.visible_devices_envs()),
        )
        return {}
    scratch = dict(env)
    accelerator.set_visible_devices_envs(scratch, ids)
    changed = {k: v for k, v in scratch.items() if env.get(k) != v}
    env.update(changed)
    return changed


def select_device_index(info: LaunchInfo, accelerator: Accelerator) -> int | None:
    """The device this local rank uses, or ``None`` on the CPU (where an index is a rank).

    ``local_rank`` when the node shows at least ``local_world_size`` devices; 0 when each
    rank sees exactly one (per-rank visible devices); otherwise ``DistributedSetupError``,
    since ranks would silently share a device.
    """
    if accelerator._name == "cpu":
        return None
    count = accelerator.device_count()
    if count >= info.local_world_size:
        return info.local_rank
    if count == 1:
        return 0
    variable = (accelerator.visible_devices_envs() or ["<none>"])[0]
    shown = os.environ.get(variable)
    raise DistributedSetupError(
        f"LOCAL_RANK={info.local_rank} of LOCAL_WORLD_SIZE={info.local_world_size} has no "
        f"device of its own: this process sees {count} {accelerator._name} device(s) "
        f"({variable}={shown!r}). Start at most {count} processes on this node, show each "
        f"rank exactly one device through {variable}, or pass set_device=False"
    )
