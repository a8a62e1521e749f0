"""A broker's epoch history in controller mode: RocketMQ's epochFileCheckpoint (EpochFileCache).

Each time a broker becomes master it appends ``(epoch, start offset)``: the commit-log bytes
from that offset up to the next entry's start (or the log's end, for the last entry) were
written by the master of that epoch. Two logs that hold the same epoch starting at the same
offset agree up to the smaller of that epoch's two ends (`consistent_offset`): a broker that
turns slave truncates its commit log there before it follows the new master.

The file, ``<storePathRootDir>/epochFileCheckpoint`` by default (``storePathEpochFile``), is
RocketMQ's checkpoint text: the number of entries, the CRC32 of the entry lines (masked to 31
bits, as RocketMQ writes it; 0 means unchecked), then one ``epoch-startOffset`` line per entry,
oldest first. It is replaced atomically with a ``.bak`` kept (`supervisors.config_file`), so a
crash leaves the old or the new history. A file that does not parse, or whose count or CRC do
not match, falls back to the ``.bak``; when both are bad the broker refuses to start
(`EpochFileError`): a history is never silently turned into an empty one, since an empty
history means "a new replica, nothing to truncate".

Appending (`EpochFile.append`): epochs strictly increase and start offsets never go back. An
entry whose start equals the last one's start replaces it: the last epoch then holds no byte,
so nothing is lost and no reader can tell it apart (RocketMQ reaches the same end by cutting
the entries at the log's end before it appends). Each change is logged.
"""

from __future__ import annotations

import itertools
import logging
import os
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

from protocol.bodies import OPEN_END_OFFSET, EpochEntry, EpochEntryCache
from supervisors.config_file import ConfigFileError, load_json_config, save_json_config

log = logging.getLogger("boltmq.broker.ha")

__all__ = ["EPOCH_FILE_NAME", "EpochFile", "EpochFileError", "consistent_offset"]

#: The file's name under storePathRootDir (RocketMQ's default storePathEpochFile).
EPOCH_FILE_NAME = "epochFileCheckpoint"


class EpochFileError(Exception):
    """The epoch file (and its backup) cannot be read, or an append breaks the history."""


class EpochFile:
    """A broker's epoch entries, kept in memory and in its epoch file; see the module doc."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        # (epoch, start offset), oldest first: epochs and starts strictly increase.
        self._entries: list[tuple[int, int]] = []

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> EpochFile:
        """Load ``path`` (empty history when neither it nor its ``.bak`` exists); raises
        `EpochFileError` naming the file when it is bad."""
        epochs = cls(path)
        epochs.load()
        return epochs

    def load(self) -> None:
        """Read the file (see the module doc for the fallback and the refusal)."""
        try:
            entries = load_json_config(self.path, _parse)
        except ConfigFileError as exc:
            raise EpochFileError(
                f"storePathEpochFile: {exc}; fix or remove the file (removing it makes this "
                "broker a new replica that keeps its log untruncated)"
            ) from exc
        self._entries = entries or []

    # -- reading ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def last_epoch(self) -> int:
        """The newest epoch (-1 when there is none, as RocketMQ answers)."""
        return self._entries[-1][0] if self._entries else -1

    def last_start_offset(self) -> int:
        """Where the newest epoch starts (-1 when there is none)."""
        return self._entries[-1][1] if self._entries else -1

    def entries(self, max_offset: int = OPEN_END_OFFSET) -> list[EpochEntry]:
        """The entries with their end offsets: the next entry's start, ``max_offset`` (the
        commit log's end; Long.MAX_VALUE when not given) for the last."""
        return _with_ends(self._entries, max_offset)

    def to_cache(
        self, cluster_name: str, broker_name: str, broker_id: int, max_offset: int
    ) -> EpochEntryCache:
        """GET_BROKER_EPOCH_CACHE's answer for this broker whose commit log ends at
        ``max_offset``."""
        return EpochEntryCache(
            cluster_name=cluster_name,
            broker_name=broker_name,
            broker_id=broker_id,
            epoch_list=self.entries(max_offset),
            max_offset=max_offset,
        )

    # -- changes (each written through at once) --------------------------------------------

    def append(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at commit-log offset ``start_offset`` (a new master).

        Raises `EpochFileError` when ``epoch`` is not above the last one or ``start_offset``
        is below the last start; an equal start replaces the last (empty) epoch.
        """
        if start_offset < 0:
            raise EpochFileError(f"epoch {epoch}: start offset {start_offset} is negative")
        entries = self._entries
        if entries:
            last_epoch, last_start = entries[-1]
            if epoch <= last_epoch:
                raise EpochFileError(
                    f"epoch {epoch} is not above the last epoch {last_epoch} of {self.path}"
                )
            if start_offset < last_start:
                raise EpochFileError(
                    f"epoch {epoch} would start at {start_offset}, before the last epoch "
                    f"{last_epoch}'s start {last_start} in {self.path}"
                )
            if start_offset == last_start:
                log.info("epoch %d holds no message: replaced by epoch %d starting at %d",
                         last_epoch, epoch, start_offset)  # fmt: skip
                entries.pop()
        entries.append((epoch, start_offset))
        self._save()
        log.info("epoch %d starts at commit-log offset %d", epoch, start_offset)

    def truncate_suffix_from(self, offset: int) -> None:
        """Drop the entries starting at or after ``offset`` (the commit log was truncated
        there: those epochs hold no byte any more)."""
        keep = [entry for entry in self._entries if entry[1] < offset]
        if len(keep) != len(self._entries):
            dropped = self._entries[len(keep) :]
            self._entries = keep
            self._save()
            log.info("epoch entries %s dropped: the commit log now ends at %d",
                     ", ".join(f"{e}-{s}" for e, s in dropped), offset)  # fmt: skip

    def replace_all(self, entries: Iterable[EpochEntry]) -> None:
        """Take another broker's history (a slave copies its master's after truncating);
        raises `EpochFileError` when it is not strictly increasing."""
        pairs = [(entry.epoch, entry.start_offset) for entry in entries]
        _check_increasing(pairs, "the entries given")
        self._entries = pairs
        self._save()
        log.info("epoch entries replaced: %s", " ".join(f"{e}-{s}" for e, s in pairs) or "none")

    def _save(self) -> None:
        save_json_config(self.path, _format(self._entries).encode())


def consistent_offset(
    local_entries: Sequence[EpochEntry],
    local_max: int,
    remote_entries: Sequence[EpochEntry],
    remote_max: int,
) -> int:
    """The commit-log offset up to which two logs agree (RocketMQ's findConsistentPoint).

    Each log is its epoch entries (only the starts are read; each end is the next start, and
    the last one's is the log's max offset) and its max offset. The answer is, for the highest
    epoch both histories hold with the same start offset, the smaller of its two ends: the
    local log must be truncated there when it is longer. Special answers:

    * the local history is empty: ``local_max`` (a new replica: nothing is known to
      disagree, and RocketMQ skips the truncation too);
    * no epoch in common (or the remote history is empty while the local is not): -1, no
      point is known to agree; the caller must not follow (an operator decides).
    """
    if not local_entries:
        return local_max
    local = {e.epoch: e for e in _with_ends([(e.epoch, e.start_offset) for e in local_entries],
                                            local_max)}  # fmt: skip
    remote = {e.epoch: e for e in _with_ends([(e.epoch, e.start_offset) for e in remote_entries],
                                             remote_max)}  # fmt: skip
    for epoch in sorted(local, reverse=True):
        theirs = remote.get(epoch)
        ours = local[epoch]
        if theirs is not None and theirs.start_offset == ours.start_offset:
            return min(ours.end_offset, theirs.end_offset)
    return -1


# -- helpers ------------------------------------------------------------------------------


def _with_ends(pairs: Sequence[tuple[int, int]], max_offset: int) -> list[EpochEntry]:
    out = []
    for i, (epoch, start) in enumerate(pairs):
        end = pairs[i + 1][1] if i + 1 < len(pairs) else max(max_offset, start)
        out.append(EpochEntry(epoch=epoch, start_offset=start, end_offset=end))
    return out


def _crc(lines: str) -> int:
    # RocketMQ's UtilAll.crc32: java.util.zip.CRC32 masked to a positive int.
    return zlib.crc32(lines.encode()) & 0x7FFFFFFF


def _format(entries: Sequence[tuple[int, int]]) -> str:
    lines = "".join(f"{epoch}-{start}\n" for epoch, start in entries)
    return f"{len(entries)}\n{_crc(lines)}\n{lines}"


def _parse(data: bytes) -> list[tuple[int, int]]:
    """The entries of an epoch file's bytes; raises ValueError naming what is wrong."""
    text = data.decode()
    rows = text.splitlines()
    if len(rows) < 2:
        raise ValueError("expected a count line and a CRC line")
    count, crc = int(rows[0]), int(rows[1])
    entries: list[tuple[int, int]] = []
    for row in rows[2:]:
        if not row.strip():
            continue
        epoch, sep, start = row.partition("-")
        if not sep:
            raise ValueError(f"line {row!r} is not epoch-startOffset")
        entries.append((int(epoch), int(start)))
    if len(entries) != count:
        raise ValueError(f"the file says {count} entries but holds {len(entries)}")
    lines = "".join(f"{row}\n" for row in rows[2:] if row.strip())
    if crc != 0 and _crc(lines) != crc:
        raise ValueError(f"CRC {crc} does not match the entries' {_crc(lines)}")
    _check_increasing(entries, "the file")
    return entries


def _check_increasing(pairs: Sequence[tuple[int, int]], what: str) -> None:
    for (epoch_a, start_a), (epoch_b, start_b) in itertools.pairwise(pairs):
        if epoch_b <= epoch_a or start_b < start_a:
            raise EpochFileError(
                f"{what}: epoch {epoch_b}-{start_b} does not follow {epoch_a}-{start_a} "
                "(epochs must increase and starts never go back)"
            )
