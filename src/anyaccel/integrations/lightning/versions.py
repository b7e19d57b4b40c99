"""Which Lightning packages are installed, and whether their versions are ones anyaccel runs on.

The range has a lower bound only: 2.4.0, the first release after torch 2.4 (anyaccel's oldest
torch) and the oldest ``tests/integrations/test_lightning.py`` passes on. 2.3.x imports
``pkg_resources`` when loaded, which setuptools 81 and later no longer ship (and Python 3.12
virtual environments have no setuptools at all), so it fails to import on a current install.
A newer release is never refused by a pin: what the integration needs of Lightning's private
code is checked by :mod:`anyaccel.integrations.lightning.hooks`, which falls back to the
public path.
"""

from __future__ import annotations

import importlib
import importlib.util

from anyaccel.errors import AcceleratorError
from anyaccel.integrations.supported_versions import installed_version, supports

__all__ = [
    "PACKAGES",
    "SUPPORTED_LIGHTNING",
    "LightningSetupError",
    "LightningUnavailableError",
    "require_lightning",
]

#: The versions this integration runs on (PEP 440), for each of ``lightning``,
#: ``pytorch_lightning`` and ``lightning_fabric``. No upper bound (see the module docstring).
SUPPORTED_LIGHTNING = ">=2.4"

#: The Lightning packages anyaccel supports: the name of each and its (Trainer, Fabric) packages.
PACKAGES: dict[str, tuple[str, str]] = {
    "lightning": ("lightning.pytorch", "lightning.fabric"),
    "pytorch_lightning": ("pytorch_lightning", "lightning_fabric"),
}


class LightningUnavailableError(AcceleratorError, ImportError):
    """No Lightning package is installed, or one is older than :data:`SUPPORTED_LIGHTNING`."""


class LightningSetupError(AcceleratorError, ValueError):
    """A Trainer/Fabric configuration that anyaccel's accelerator cannot run as asked."""


def _extra_hint() -> str:
    """How to install the ``lightning`` extra, in a line that works from a wheel or a clone."""
    from anyaccel.extras import install_hint

    return f"Install it with `{install_hint('lightning')}`."


def _checked_version(distribution: str, fix: str) -> str:
    """The installed version of ``distribution`` (also its module), within the supported range."""
    found = installed_version(distribution) or "0"
    if not supports(SUPPORTED_LIGHTNING, found):
        raise LightningUnavailableError(
            f"{distribution} {found} is installed, but anyaccel.integrations.lightning supports "
            f"{distribution}{SUPPORTED_LIGHTNING}. {fix}"
        )
    return found


def require_lightning() -> dict[str, str]:
    """Each installed Lightning package (a key of :data:`PACKAGES`) and its checked version.

    :raises LightningUnavailableError: none is installed; ``pytorch_lightning`` is installed
        without ``lightning_fabric``; one of them is older than :data:`SUPPORTED_LIGHTNING`.
    """
    found: dict[str, str] = {}
    if importlib.util.find_spec("lightning") is not None:
        fix = f"{_extra_hint()[:-1]} (it asks for a supported version)."
        found["lightning"] = _checked_version("lightning", fix)
    if importlib.util.find_spec("pytorch_lightning") is not None:
        pins = f'"pytorch_lightning{SUPPORTED_LIGHTNING}" "lightning_fabric{SUPPORTED_LIGHTNING}"'
        fix = f"Install supported ones with `pip install {pins}`, or uninstall pytorch_lightning."
        if importlib.util.find_spec("lightning_fabric") is None:
            raise LightningUnavailableError(
                "pytorch_lightning is installed but lightning_fabric, which it needs, is not. "
                + fix
            )
        found["pytorch_lightning"] = _checked_version("pytorch_lightning", fix)
        _checked_version("lightning_fabric", fix)
    if not found:
        raise LightningUnavailableError(
            "anyaccel.integrations.lightning needs the `lightning` package (or the standalone "
            f"`pytorch_lightning` with `lightning_fabric`). {_extra_hint()}"
        )
    return found
