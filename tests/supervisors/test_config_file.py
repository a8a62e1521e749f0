"""Atomic JSON config files: tmp + fsync + rename, .bak kept, .bak fallback, both-corrupt error."""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest

from supervisors import ConfigFileError, load_json_config, save_json_config


def parse(data: bytes) -> dict[str, object]:
    value = orjson.loads(data)
    assert isinstance(value, dict)
    return value


def test_missing_file_loads_none(tmp_path: Path) -> None:
    assert load_json_config(tmp_path / "topics.json", parse) is None


def test_save_keeps_previous_as_bak_and_leaves_no_tmp(tmp_path: Path) -> None:
    path = tmp_path / "config" / "topics.json"
    save_json_config(path, b'{"v": 1}')
    assert not path.with_name("topics.json.bak").exists()
    save_json_config(path, b'{"v": 2}')
    assert parse(path.read_bytes()) == {"v": 2}
    assert parse(path.with_name("topics.json.bak").read_bytes()) == {"v": 1}
    assert not path.with_name("topics.json.tmp").exists()
    assert load_json_config(path, parse) == {"v": 2}


def test_corrupt_file_falls_back_to_bak_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "consumerOffset.json"
    save_json_config(path, b'{"offsetTable": {"a": 1}}')
    save_json_config(path, b'{"offsetTable": {"a": 2}}')
    path.write_bytes(b'{"offsetTable": {"a"')  # torn write
    with caplog.at_level(logging.WARNING, logger="boltmq.storage.config"):
        assert load_json_config(path, parse) == {"offsetTable": {"a": 1}}
    assert any("backup" in r.getMessage() for r in caplog.records)


def test_empty_file_falls_back_to_bak(tmp_path: Path) -> None:
    path = tmp_path / "delayOffset.json"
    save_json_config(path, b'{"offsetTable": {}}')
    save_json_config(path, b'{"offsetTable": {"1": 5}}')
    path.write_bytes(b"")
    assert load_json_config(path, parse) == {"offsetTable": {}}


def test_both_corrupt_raise_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "subscriptionGroup.json"
    path.write_bytes(b"{nope")
    path.with_name(path.name + ".bak").write_bytes(b"[also bad")
    with pytest.raises(ConfigFileError, match=r"subscriptionGroup\.json.*backup.*corrupt"):
        load_json_config(path, parse)


def test_corrupt_without_bak_raises_rather_than_empty_state(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    path.write_bytes(b"garbage")
    with pytest.raises(ConfigFileError, match=r"no topics\.json\.bak"):
        load_json_config(path, parse)


def test_crash_before_rename_leaves_the_old_content(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    save_json_config(path, b'{"v": 1}')
    # A crash after writing the tmp file but before the rename: the tmp file is ignored.
    path.with_name("topics.json.tmp").write_bytes(b'{"v": 2')
    assert load_json_config(path, parse) == {"v": 1}
    save_json_config(path, b'{"v": 3}')
    assert load_json_config(path, parse) == {"v": 3}
