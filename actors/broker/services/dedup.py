"""The dedup index: a send whose ``BOLTMQ_DEDUP_KEY`` was stored within the window is not
stored again (BoltMQ's own property; Apache brokers ignore it and store duplicates).

A key is scoped by topic: (topic, key) names one message. The send handler asks the index
before it appends (`DedupIndex.lookup`), reserves a new key (`reserve`) so that a second send
of the same key that arrives while the first is being stored is refused (SYSTEM_BUSY, the
producer sends again) rather than appended too, and `record`\\ s the stored message's offset
msg id, queue id and queue offset once the store has it, or `release`\\ s the key when the put
failed. A key seen again is answered SEND_OK with the original message's msg id, queue and
queue offset, and nothing is appended.

The window is bounded by time (``dedupWindowSeconds``) and by number of keys
(``dedupMaxKeys``): the oldest key goes first when either is passed, so memory is bounded
(about 410 bytes a key with 50-character keys, measured by ``python -m bench
pipeline-write``).

Ownership: the index is plain state changed only by synchronous code on the broker's trio
thread (the send handler, which the connection reader calls inline, and the store writer's
completion callback), never across an await, so no check-then-act can interleave; the fast
path gains two dict operations and no await. At start, `DedupService.run` rebuilds it from the
commit log's tail before the broker serves (the commit log is the durable record: under
SYNC_FLUSH an acknowledged key is on disk), so nothing new is written and nothing new can be
corrupted. It scans once per broker start (in a worker thread, while nothing else touches the
index); a restart of the child keeps the index it has.
"""

from __future__ import annotations

import collections
import logging
import re
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple

import attrs
import trio

from protocol.message import (
    BLANK_MAGIC_CODE,
    MAGIC_CODE,
    NAME_VALUE_SEPARATOR,
    MessageConst,
    MessageExt,
    MessageFormatError,
    decode_record,
    peek_record_header,
)

if TYPE_CHECKING:
    from storage import MessageStore

log = logging.getLogger("boltmq.broker.dedup")

DEDUP_KEY = MessageConst.DEDUP_KEY
"""The property a send carries its dedup key in."""

# The key's name as stored in a record's properties (name, then the value separator).
_KEY_MARK = re.compile(re.escape(DEDUP_KEY.encode() + NAME_VALUE_SEPARATOR.encode()))


def wall_ms() -> int:
    """Milliseconds since the epoch: store timestamps are wall-clock, so the window is too."""
    return time.time_ns() // 1_000_000


class StoredMessage(NamedTuple):
    """Where the first message with a key went: what a duplicate is answered with."""

    msg_id: str
    queue_id: int
    queue_offset: int


@attrs.frozen
class DedupStatistics:
    """The index's counters at one moment."""

    keys: int
    reserved: int
    max_keys: int
    window_ms: int
    duplicates: int
    busy: int
    expired: int
    evicted: int
    rebuilt_keys: int


class KeyInFlight(Exception):
    """A send of this key is being stored right now; the caller should send again."""


# (stored at ms, msg id or None while reserved, queue id, queue offset). A tuple of atomic
# values, which the cyclic garbage collector stops tracking: a million keys cost it nothing.
_Entry = tuple[int, str | None, int, int]


class DedupIndex:
    """Keys seen within the window and where their message was stored; plain state, no I/O."""

    def __init__(self, window_ms: int, max_keys: int, clock: Callable[[], int] = wall_ms) -> None:
        if window_ms <= 0 or max_keys < 0:
            raise ValueError("the dedup window must be > 0 ms and max keys >= 0")
        self.window_ms = window_ms
        self.max_keys = max_keys
        self._clock = clock
        # Keyed by "topic\x01key" (one string, not a tuple: less memory). Insertion order is
        # age order: keys are added with the clock's time, and a rebuild adds them oldest first.
        self._entries: collections.OrderedDict[str, _Entry] = collections.OrderedDict()
        self._reserved = 0
        self.duplicates = 0
        self.busy = 0
        self.expired = 0
        self.evicted = 0
        self.rebuilt_keys = 0

    @property
    def enabled(self) -> bool:
        """Whether keys are kept at all (``dedupMaxKeys=0`` turns deduplication off)."""
        return self.max_keys > 0

    def now_ms(self) -> int:
        """The index's clock, in ms."""
        return self._clock()

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every key (a broker that becomes master rebuilds from its own log)."""
        self._entries.clear()
        self._reserved = 0

    def lookup(self, topic: str, key: str) -> StoredMessage | None:
        """The stored message for a key seen within the window, else None.

        Raises `KeyInFlight` when a send of the key is being stored.
        """
        entry = self._entries.get(f"{topic}\x01{key}")
        if entry is None:
            return None
        at_ms, msg_id, queue_id, queue_offset = entry
        if msg_id is None:
            self.busy += 1
            raise KeyInFlight(f"a message with dedup key {key!r} of topic {topic} is being stored")
        if at_ms < self._clock() - self.window_ms:
            self._expire()
            return None
        self.duplicates += 1
        return StoredMessage(msg_id, queue_id, queue_offset)

    def reserve(self, topic: str, key: str) -> None:
        """Mark a new key as being stored (after a `lookup` that found nothing)."""
        entries = self._entries
        name = f"{topic}\x01{key}"
        now = self._clock()
        if entries:
            oldest = entries[next(iter(entries))]
            if oldest[0] < now - self.window_ms:
                self._expire()
        if name in entries:  # an expired key not yet dropped: it goes to the young end
            del entries[name]
        entries[name] = (now, None, 0, 0)
        self._reserved += 1
        if len(entries) > self.max_keys:
            self._bound()

    def record(self, topic: str, key: str, stored: StoredMessage) -> None:
        """The reserved key's message is stored: later sends of the key are duplicates."""
        name = f"{topic}\x01{key}"
        entry = self._entries.get(name)
        if entry is not None and entry[1] is None:
            self._reserved -= 1
            self._entries[name] = (entry[0], *stored)

    def release(self, topic: str, key: str) -> None:
        """The reserved key's put failed: forget the key, a new send may store it."""
        name = f"{topic}\x01{key}"
        entry = self._entries.get(name)
        if entry is not None and entry[1] is None:
            self._reserved -= 1
            del self._entries[name]

    def lookup_batch(
        self, topic: str, keys: list[str | None]
    ) -> tuple[list[StoredMessage | None], list[str | None]]:
        """`lookup` of each key of a batch (None for a message without one) in one call,
        and the index's name of each key, for `reserve_batch` and `record_batch`: the batch
        path runs once per message, so the per-call overhead counts."""
        entries = self._entries
        found: list[StoredMessage | None] = []
        names = [None if key is None else f"{topic}\x01{key}" for key in keys]
        cutoff = -1
        for name in names:
            entry = None if name is None else entries.get(name)
            if name is None or entry is None:
                found.append(None)
                continue
            at_ms, msg_id, queue_id, queue_offset = entry
            if msg_id is None:
                self.busy += 1
                key = keys[len(found)]
                raise KeyInFlight(
                    f"a message with dedup key {key!r} of topic {topic} is being stored"
                )
            if cutoff < 0:
                cutoff = self._clock() - self.window_ms
            if at_ms < cutoff:
                del entries[name]  # expired: reserved again at the young end
                self.expired += 1
                found.append(None)
                continue
            self.duplicates += 1
            found.append(StoredMessage(msg_id, queue_id, queue_offset))
        return found, names

    def reserve_batch(self, names: list[str]) -> None:
        """`reserve` of keys `lookup_batch` just found new (by their names; none repeated)."""
        entries = self._entries
        now = self._clock()
        if entries and entries[next(iter(entries))][0] < now - self.window_ms:
            self._expire()
        reserved = (now, None, 0, 0)
        for name in names:
            entries[name] = reserved
        self._reserved += len(names)
        if len(entries) > self.max_keys:
            self._bound()

    def record_batch(
        self, names: list[tuple[int, str]], msg_ids: list[str], queue_id: int, first_offset: int
    ) -> None:
        """`record` of a batch's reserved keys: (k, name) for the k-th message stored, which
        has ``msg_ids[k]`` and queue offset ``first_offset + k``."""
        entries = self._entries
        for k, name in names:
            entry = entries.get(name)
            if entry is not None and entry[1] is None:
                self._reserved -= 1
                entries[name] = (entry[0], msg_ids[k], queue_id, first_offset + k)

    def release_batch(self, names: list[tuple[int, str]]) -> None:
        """`release` of a batch's reserved keys (its put failed)."""
        entries = self._entries
        for _, name in names:
            entry = entries.get(name)
            if entry is not None and entry[1] is None:
                self._reserved -= 1
                del entries[name]

    def add_stored(self, topic: str, key: str, at_ms: int, stored: StoredMessage) -> bool:
        """A key found in the commit log (oldest first); the first record of a key wins.

        Returns whether the key is new to the index.
        """
        name = f"{topic}\x01{key}"
        if name in self._entries or at_ms < self._clock() - self.window_ms:
            return False
        self._entries[name] = (at_ms, *stored)
        self.rebuilt_keys += 1
        if len(self._entries) > self.max_keys:
            self._bound()
        return True

    def statistics(self) -> DedupStatistics:
        """Counters at one moment."""
        return DedupStatistics(
            keys=len(self._entries), reserved=self._reserved, max_keys=self.max_keys,
            window_ms=self.window_ms, duplicates=self.duplicates, busy=self.busy,
            expired=self.expired, evicted=self.evicted, rebuilt_keys=self.rebuilt_keys,
        )  # fmt: skip

    def _expire(self) -> None:
        """Drop keys older than the window from the old end (reserved ones stay until done)."""
        cutoff = self._clock() - self.window_ms
        entries = self._entries
        while entries:
            oldest_key = next(iter(entries))
            at_ms, msg_id, _, _ = entries[oldest_key]
            if at_ms >= cutoff or msg_id is None:
                return
            del entries[oldest_key]
            self.expired += 1

    def _bound(self) -> None:
        entries = self._entries
        while len(entries) > self.max_keys:
            _, dropped = entries.popitem(last=False)
            if dropped[1] is None:
                self._reserved -= 1
            self.evicted += 1


class DedupService:
    """The broker's dedup index and its rebuild from the commit log (a supervisor child)."""

    def __init__(self, index: DedupIndex, store: MessageStore, *, rebuild: bool = True) -> None:
        self.index = index
        self.store = store
        # False for a store with no earlier life (storeType=memory): nothing to rebuild from.
        self._rebuilt = not rebuild
        self._rebuild_allowed = rebuild

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Rebuild the index from the commit log's tail, report ready, then idle.

        Started after the store and before the listeners, so no send is served before the
        keys already stored are known.
        """
        if self.index.enabled and not self._rebuilt:
            self._rebuilt = True  # a restarted child must not scan while sends are served
            started = time.monotonic()
            try:
                scanned, found = await trio.to_thread.run_sync(self.rebuild)
            except Exception:  # serve anyway: a broker without its old keys beats none
                log.exception(
                    "dedup index: the rebuild from the commit log failed; keys stored before "
                    "this start are not known, so a re-sent message stored then is stored again"
                )
                scanned = found = 0
            log.info(
                "dedup index: %d key(s) within the last %d s rebuilt from the commit log in "
                "%.2f s (%d record(s) decoded)", found, self.index.window_ms // 1000,
                time.monotonic() - started, scanned,
            )  # fmt: skip
        task_status.started()
        await trio.sleep_forever()

    async def rebuild_for_new_master(self) -> None:
        """Replace the index with the keys of this broker's own commit log.

        Called by controller mode before a promoted broker takes writes: a slave's index holds
        nothing of what it replicated, and a truncation may have cut messages it still names,
        so a producer's retry of a replicated message would be stored twice and a retry of a
        cut one answered SEND_OK with nothing stored."""
        if not self.index.enabled or not self._rebuild_allowed:
            return
        self.index.clear()
        scanned, found = await trio.to_thread.run_sync(self.rebuild)
        log.info("dedup index: %d key(s) rebuilt from the commit log for the new mastership "
                 "(%d record(s) decoded)", found, scanned)  # fmt: skip

    def rebuild(self) -> tuple[int, int]:
        """Add every key of the records stored within the window; (records decoded, keys)."""
        scanned = found = 0
        for message in self._recent_records():
            scanned += 1
            key = message.properties.get(DEDUP_KEY)
            if key is None:
                continue
            # A delayed or half message was stored under a system topic first; it names its
            # real topic, which is what its sender's key is scoped by.
            topic = message.properties.get(MessageConst.REAL_TOPIC) or message.topic
            stored = StoredMessage(message.offset_msg_id, message.queue_id, message.queue_offset)
            if self.index.add_stored(topic, key, message.store_timestamp, stored):
                found += 1
        return scanned, found

    def _recent_records(self) -> Iterator[MessageExt]:
        """Records stored within the window that may hold a dedup key, oldest first, bodies
        not read."""
        store = self.store
        file_size = store.config.mapped_file_size_commit_log
        cutoff = self.index.now_ms() - self.index.window_ms
        offset = store.get_min_phy_offset()
        end = store.get_max_phy_offset()
        # Skip whole files whose successor's first record is already older than the window.
        first = offset - offset % file_size
        while first + file_size < end:
            data = store.get_commit_log_data(first + file_size)
            if data is None or _first_store_time(data) >= cutoff:
                break
            first += file_size
        offset = max(offset, first)
        while offset < end:
            data = store.get_commit_log_data(offset)
            if data is None:
                offset += file_size - offset % file_size
                continue
            # Only records whose bytes hold the key's name are decoded: one scan of the file
            # finds them (a file without one is skipped whole), the others are stepped over
            # by their size. A body that happens to hold the name is decoded and has no key.
            hit = _KEY_MARK.search(data)
            pos = 0
            while hit is not None and pos + 8 <= len(data):
                size, magic = peek_record_header(data, pos)
                if magic == BLANK_MAGIC_CODE or magic != MAGIC_CODE or size <= 0:
                    break
                if pos + size > hit.start():
                    try:
                        message = decode_record(data, pos, read_body=False)
                    except MessageFormatError as exc:
                        log.warning("dedup index rebuild stops at commit-log offset %d: %s",
                                    offset + pos, exc)  # fmt: skip
                        return
                    if message.store_timestamp >= cutoff:
                        yield message
                    hit = _KEY_MARK.search(data, pos + size)
                pos += size
            offset += file_size - offset % file_size


def _first_store_time(data: memoryview) -> int:
    try:
        return decode_record(data, 0, read_body=False).store_timestamp
    except MessageFormatError:
        return 0
