"""The epoch file (RocketMQ's epochFileCheckpoint) and the consistent point of two logs.

Pure: real files in tmp_path, no server.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from actors.broker.ha.epoch import EpochFile, EpochFileError, consistent_offset
from protocol.bodies import OPEN_END_OFFSET, EpochEntry


def entries(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(epoch=e, start_offset=s) for e, s in pairs]


# -- the file ----------------------------------------------------------------------------------


def test_append_writes_rocketmq_checkpoint_text_and_loads_back(tmp_path: Path) -> None:
    path = tmp_path / "epochFileCheckpoint"
    epochs = EpochFile.open(path)
    assert (len(epochs), epochs.last_epoch(), epochs.entries()) == (0, -1, [])
    epochs.append(1, 0)
    epochs.append(2, 1000)
    lines = "1-0\n2-1000\n"
    # RocketMQ's CheckpointFile: count, CRC32 of the lines masked to 31 bits, the lines.
    assert path.read_text() == f"2\n{zlib.crc32(lines.encode()) & 0x7FFFFFFF}\n{lines}"
    again = EpochFile.open(path)
    assert again.last_epoch() == 2
    assert again.entries(5000) == [
        EpochEntry(epoch=1, start_offset=0, end_offset=1000),
        EpochEntry(epoch=2, start_offset=1000, end_offset=5000),
    ]
    assert again.entries()[-1].end_offset == OPEN_END_OFFSET
    cache = again.to_cache("DefaultCluster", "broker-a", 2, 5000)
    assert (cache.broker_id, cache.max_offset, len(cache.epoch_list)) == (2, 5000, 2)


def test_append_refuses_going_back_and_replaces_an_empty_epoch(tmp_path: Path) -> None:
    epochs = EpochFile.open(tmp_path / "epochs")
    epochs.append(3, 100)
    with pytest.raises(EpochFileError, match="not above"):
        epochs.append(3, 200)
    with pytest.raises(EpochFileError, match="before"):
        epochs.append(4, 50)
    # Epoch 3 holds no byte when epoch 4 starts where it did: 4 replaces it.
    epochs.append(4, 100)
    assert [(e.epoch, e.start_offset) for e in epochs.entries()] == [(4, 100)]
    assert EpochFile.open(tmp_path / "epochs").last_epoch() == 4


def test_truncate_suffix_and_replace_all(tmp_path: Path) -> None:
    epochs = EpochFile.open(tmp_path / "epochs")
    for epoch, start in ((1, 0), (2, 500), (4, 900)):
        epochs.append(epoch, start)
    epochs.truncate_suffix_from(900)
    assert [e.epoch for e in EpochFile.open(tmp_path / "epochs").entries()] == [1, 2]
    epochs.truncate_suffix_from(501)  # epoch 2 starts below: kept
    assert epochs.last_epoch() == 2
    epochs.replace_all(entries((1, 0), (2, 500), (3, 700)))
    assert EpochFile.open(tmp_path / "epochs").last_start_offset() == 700
    with pytest.raises(EpochFileError, match="does not follow"):
        epochs.replace_all(entries((2, 0), (1, 10)))
    assert epochs.last_epoch() == 3  # a refused replacement changes nothing


def test_a_bad_file_falls_back_to_its_backup_and_is_refused_without_one(tmp_path: Path) -> None:
    path = tmp_path / "epochs"
    epochs = EpochFile.open(path)
    epochs.append(1, 0)
    epochs.append(2, 10)  # the first content is now the .bak
    path.write_text("2\n12345\n1-0\n2-10\n")  # CRC does not match
    assert EpochFile.open(path).last_epoch() == 1  # from the backup
    path.with_name("epochs.bak").write_text("garbage")
    with pytest.raises(EpochFileError, match="storePathEpochFile"):
        EpochFile.open(path)
    # Count mismatch, and a line that is not epoch-startOffset.
    path.with_name("epochs.bak").unlink()
    for bad in ("3\n0\n1-0\n", "1\n0\nabc\n"):
        path.write_text(bad)
        with pytest.raises(EpochFileError):
            EpochFile.open(path)
    # CRC 0 means unchecked, as RocketMQ reads it.
    path.write_text("1\n0\n7-42\n")
    assert EpochFile.open(path).last_start_offset() == 42


# -- the consistent point ---------------------------------------------------------------------


def test_same_history_agrees_up_to_the_shorter_log() -> None:
    history = entries((1, 0), (2, 100))
    assert consistent_offset(history, 300, history, 300) == 300
    assert consistent_offset(history, 300, history, 250) == 250


def test_local_longer_tail_in_the_same_epoch_is_cut_at_the_remote_end() -> None:
    # An old master wrote 120 bytes the new master never had, in the same epoch.
    local = entries((1, 0), (2, 100))
    remote = entries((1, 0), (2, 100), (3, 180))
    assert consistent_offset(local, 300, remote, 400) == 180


def test_divergent_epoch_after_the_common_one() -> None:
    # Both had epoch 2 from 100; the local went on in epoch 3 from 200, the remote in
    # epoch 4 from 150: they agree only up to 150.
    local = entries((1, 0), (2, 100), (3, 200))
    remote = entries((1, 0), (2, 100), (4, 150))
    assert consistent_offset(local, 260, remote, 500) == 150
    # The same epoch number starting elsewhere is not common: look further back.
    remote = entries((1, 0), (2, 90))
    assert consistent_offset(local, 260, remote, 500) == 90


def test_no_common_epoch_and_empty_histories() -> None:
    assert consistent_offset(entries((2, 0)), 100, entries((1, 0)), 100) == -1
    assert consistent_offset(entries((1, 0)), 100, [], 0) == -1
    # A new replica (no history) keeps its log: nothing is known to disagree.
    assert consistent_offset([], 0, entries((1, 0)), 100) == 0
    assert consistent_offset([], 70, entries((1, 0)), 100) == 70
