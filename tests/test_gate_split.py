"""The gate's split: the newcomer's full run, and beside it only ``-m extras`` with the pinned
frameworks. A test skipped for a missing extra without the marker would run nowhere, so the
suite's own conftest fails it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent

SAMPLE = textwrap.dedent(
    """
    import pytest

    def test_unmarked_skip_for_an_extra():
        pytest.skip("DeepSpeed is not installed (set ANYACCEL_DEEPSPEED_PYTHON)")

    @pytest.mark.extras
    def test_marked_skip_for_an_extra():
        pytest.importorskip("lightning_that_is_not_there")

    def test_unmarked_skip_for_another_reason():
        pytest.skip("needs an NVIDIA GPU")

    def test_unmarked_skip_naming_an_extra_for_another_reason():
        pytest.skip("fp32_optimizer_states is a DeepSpeed-signature argument")
    """
)


def test_an_unmarked_test_skipped_for_a_missing_extra_fails_and_names_the_marker(
    tmp_path: Path,
) -> None:
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    # tests/integrations (the framework hand-overs) is marked by its folder
    (tmp_path / "integrations").mkdir()
    (tmp_path / "integrations" / "test_hand_over.py").write_text(
        "import pytest\n\ndef test_needs_lightning():\n    pytest.skip('lightning is absent')\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore", "-rfs",
         str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = result.stdout
    assert "1 failed, 4 skipped" in out, out[-3000:]
    assert "test_unmarked_skip_for_an_extra skipped for a missing extra" in out
    assert "has no @pytest.mark.extras" in out
