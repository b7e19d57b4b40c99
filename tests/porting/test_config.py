"""``[tool.anyaccel]``: finding the nearest pyproject, reading it, and explaining mistakes."""

from __future__ import annotations

from pathlib import Path

import pytest

from anyaccel.porting.config import CheckConfig, ConfigError, find_config, load_config


def _pyproject(directory: Path, body: str) -> Path:
    path = directory / "pyproject.toml"
    path.write_text(body)
    return path


def test_defaults_select_every_rule() -> None:
    assert CheckConfig().enabled_codes() >= {"ACC001", "ACC042"}


def test_select_and_ignore_take_prefixes(tmp_path: Path) -> None:
    body = '[tool.anyaccel]\nselect = ["ACC0"]\nignore = ["ACC04", "ACC001"]\n'
    path = _pyproject(tmp_path, body)
    codes = load_config(path).enabled_codes()
    assert "ACC001" not in codes and "ACC041" not in codes and "ACC003" in codes


def test_nearest_pyproject_with_the_table_wins(tmp_path: Path) -> None:
    _pyproject(tmp_path, '[tool.anyaccel]\nexclude = ["gen/"]\n')
    inner = tmp_path / "pkg"
    inner.mkdir()
    _pyproject(inner, "[project]\nname = 'x'\n")  # no [tool.anyaccel]: keep looking up
    config = find_config(inner / "mod.py")
    assert config.source == tmp_path / "pyproject.toml" and config.exclude == ("gen/",)
    assert config.root == tmp_path


def test_no_pyproject_gives_defaults(tmp_path: Path) -> None:
    config = find_config(tmp_path)
    # /tmp has no pyproject.toml above it on a sane machine; if one exists it must have the table.
    assert config.source is None or "[tool.anyaccel" in config.source.read_text()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[tool.anyaccel]\nselect = ["XYZ"]\n', "unknown rule code 'XYZ' in select of"),
        ('[tool.anyaccel]\nignore = "ACC001"\n', "ignore in .* must be a list of strings"),
        ("[tool.anyaccel]\nexlude = []\n", "unknown key.*exlude.*known keys: exclude"),
        ("[tool.anyaccel]\nrespect-gitignore = 'no'\n", "must be true or false"),
        ("[tool.anyaccel\n", "cannot read"),
    ],
)
def test_bad_settings_are_explained(tmp_path: Path, body: str, message: str) -> None:
    path = _pyproject(tmp_path, body)
    with pytest.raises(ConfigError, match=message):
        load_config(path)
