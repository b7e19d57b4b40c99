"""The one version check the Lightning and accelerate integrations share."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from anyaccel.integrations.accelerate import SUPPORTED_VERSIONS
from anyaccel.integrations.supported_versions import installed_version, supports


@pytest.mark.parametrize(
    ("specifier", "version", "expected"),
    [
        (SUPPORTED_VERSIONS["accelerate"].specifier, "1.15.0", True),
        (SUPPORTED_VERSIONS["accelerate"].specifier, "2.0.0", False),
        (SUPPORTED_VERSIONS["accelerate"].specifier, "0.34.2", False),
        (SUPPORTED_VERSIONS["transformers"].specifier, "5.23.0", True),
        (SUPPORTED_VERSIONS["transformers"].specifier, "not-a-version", False),
    ],
)
def test_both_integrations_compare_versions_one_way(
    specifier: str, version: str, expected: bool
) -> None:
    assert supports(specifier, version) is expected


def test_lightning_compares_its_versions_the_same_way() -> None:
    # importing the Lightning integration needs Lightning: where it is absent, this skips
    pytest.importorskip(
        "lightning", reason="the Lightning integration needs `pip install anyaccel[lightning]`"
    )
    from anyaccel.integrations.lightning.versions import SUPPORTED_LIGHTNING

    assert supports(SUPPORTED_LIGHTNING, "2.4.0") and not supports(SUPPORTED_LIGHTNING, "2.3.3")
    assert supports(SUPPORTED_LIGHTNING, "2.7.0rc1")  # a pre-release of a supported line counts


def test_the_installed_version_comes_from_metadata_else_the_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert installed_version("no_such_distribution_anyaccel") is None
    assert installed_version("pytest") == pytest.__version__
    (tmp_path / "bare_module_anyaccel.py").write_text("__version__ = '3.1'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert installed_version("bare_module_anyaccel") == "3.1"  # importable, no metadata
    sys.modules.pop("bare_module_anyaccel", None)
