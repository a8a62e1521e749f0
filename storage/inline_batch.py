"""A batch send encoded straight into the commit log, in the caller's task (the inline path).

The queued and the fallback paths encode a batch into a buffer (`storage._encode.encode_batch`)
and `CommitLog.append` copies it into the mapped file, then patches each record's queue offset,
commit-log offset and store time. `append_batch` writes each record once, in place, with those
fields already set: byte for byte the same records (tests compare them), without the buffer,
the copy and the patch pass. It takes only the common case and leaves the rest to the caller.
The loop over the records is `write_batch_records`, compiled when ``./dev build-ext`` built
``protocol._speedups`` (one pass in C, no object per record), else the pure twin here.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence
from itertools import accumulate, chain, repeat
from operator import add, and_, itemgetter
from typing import Literal

from protocol.message import crc32
from protocol.message._batch import SameSizedElements
from storage._encode import (
    _MAGIC_CODE,
    _TOPIC_PARTS,
    _V6_BITS,
    MAX_PROPERTIES_SIZE,
    MAX_TOPIC_SIZE,
    _ipv4_cache,
)
from storage._hash import tags_code as hash_tags
from storage._record import split_properties
from storage.commit_log import CommitLog
from storage.consume_queue import ENTRY
from storage.group_commit import CommitGroup
from storage.mapped_file import DiskFullError
from storage.results import MessageBatch, PutMessageResult, PutMessageStatus

# PREPARED (0x4) and ROLLBACK (0xC) are the transaction values with bit 0x4 set: such records
# take no queue offset and no consume-queue entry (`CommitLog.append` handles them).
_NOT_IN_QUEUE_BIT = 0x4
_PUT_OK = PutMessageStatus.PUT_OK


def _topic_part(topic: str) -> bytes | None:
    """The record's topic length byte and bytes (cached), None for a topic too long."""
    part = _TOPIC_PARTS.get(topic)
    if part is None:
        encoded = topic.encode()
        if len(encoded) > MAX_TOPIC_SIZE:
            return None
        if len(_TOPIC_PARTS) > 4096:
            _TOPIC_PARTS.clear()
        part = _TOPIC_PARTS[topic] = bytes([len(encoded)]) + encoded
    return part


def append_batch(
    commit_log: CommitLog,
    batch: MessageBatch,
    store_host: tuple[str, int],
    max_message_size: int,
    group: CommitGroup,
    msg_id_prefix: str,
    index_enabled: bool,
) -> PutMessageResult | None:
    """Write ``batch``'s records straight into the commit log at the write position, in
    ``group``, and return its result; None when it is not the common case (an empty batch,
    a host not IPv4, a transaction record, an element too large, properties too long, a
    batch that does not fit the rest of the file, disk blocks that cannot be reserved for
    it): the caller then
    encodes it with `storage._encode.encode_batch` and appends it with `append_put`, which
    answers those cases. The caller sets ``group.store_timestamp``."""
    elements = batch.elements
    files = commit_log.files.files
    born = _ipv4_cache.get(batch.born_host[0], b"")
    store = _ipv4_cache.get(store_host[0], b"")
    sys_flag = batch.sys_flag & ~_V6_BITS
    if not elements or not files or not born or not store or sys_flag & _NOT_IN_QUEUE_BIT:
        return None
    topic = batch.topic
    topic_part = _topic_part(topic)
    if topic_part is None:
        return None
    header_props = batch.properties.encode()
    # The pure path sizes a plain batch (`_PlainBatch`) once, for the checks and the write,
    # and writes any other batch record by record without asking again whether it is plain.
    pure = write_batch_records is write_batch_records_py
    plain = (
        _PlainBatch.of(elements, header_props, topic_part, topic, index_enabled) if pure else None
    )
    if plain is not None:
        total = plain.total
        if plain.longest > MAX_PROPERTIES_SIZE or plain.largest > max_message_size:
            return None
    else:
        fixed = 90 + len(topic_part)
        total = batch_records_size(
            elements, header_props, fixed, max_message_size, MAX_PROPERTIES_SIZE
        )
        if total < 0:
            return None
    mapped = files[-1]
    pos = mapped.wrote_position
    end = pos + total
    if end > mapped.file_size - 8:
        return None  # the slow path writes the end-of-file blank first
    if end + 8 > mapped.reserved_position:
        if commit_log.disk_full:
            return None  # the slow path notes in the log when the disk has room again
        try:
            mapped.reserve(end + 8)
        except DiskFullError:
            return None  # the slow path answers it (and says so in the log)
    queue_id = batch.queue_id
    key = (topic, queue_id)
    table = commit_log.topic_queue_table
    first_queue_offset = table.get(key, 0)
    table[key] = first_queue_offset + len(elements)
    now = group.store_timestamp
    entries = group.queue_entries.get(key)
    if entries is None:
        entries = group.queue_entries[key] = bytearray()
    offsets: list[int] = []
    born_host = batch.born_host
    if plain is not None:
        pos = plain.write(
            mapped.view, pos, mapped.file_from_offset, queue_id, sys_flag,
            batch.born_timestamp, born, born_host[1], now, store, store_host[1],
            batch.reconsume_times, first_queue_offset, entries, offsets,
            group.index_keys if index_enabled else None,
        )  # fmt: skip
    else:
        pos = (_write_records_one_by_one if pure else write_batch_records)(
            mapped.view, pos, mapped.file_from_offset, elements, header_props, topic_part,
            queue_id, sys_flag, batch.born_timestamp, born, born_host[1], now, store,
            store_host[1], batch.reconsume_times, first_queue_offset, entries, offsets,
            group.index_keys if index_enabled else None, topic,
        )  # fmt: skip
    mapped.wrote_position = pos
    commit_log.last_store_timestamp = now
    group.wrote += total
    group.records += len(elements)
    group.last_offset = offsets[-1]
    result = PutMessageResult(
        _PUT_OK, offsets[0], total, first_queue_offset, len(elements), now, offsets, msg_id_prefix
    )
    group.inline.append(result)
    return result


def batch_records_size_py(
    elements: list[tuple[int, bytes, str]],
    header_props: bytes,
    fixed: int,
    max_message_size: int,
    max_properties_size: int,
) -> int:
    """The bytes the batch's records take (``fixed`` is a record's size without body and
    properties), or -1 when one is larger than ``max_message_size`` or has properties longer
    than ``max_properties_size``."""
    header_len = len(header_props)
    total = 0
    for _, body, element_props in elements:
        # ASCII properties (the usual ones) are as many bytes as characters: no encode.
        props_len = len(element_props) if element_props.isascii() else len(element_props.encode())
        if header_len:
            if props_len and element_props[-1] != "\x02":
                props_len += 1
            props_len += header_len
        size = fixed + len(body) + props_len
        if props_len > max_properties_size or size > max_message_size:
            return -1
        total += size
    return total


# The 48 bytes from SYSFLAG to PREPAREDOFFSET, the same for every record of a batch (packed
# once per batch).
_BATCH_FIELDS = struct.Struct(">iq4siq4siiq")
# One struct per (body, topic part, properties) length that packs a whole record at once:
# TOTALSIZE to PHYSICALOFFSET, the batch's shared fields, BODYLEN, BODY, the topic part,
# PROPERTIESLENGTH and PROPERTIES. A batch's records mostly share their lengths, so a record
# costs one lookup and one ``pack_into`` straight into the mapped file.
_RECORD_PACKERS: dict[int, Callable[..., None]] = {}
_RECORD_PACKERS_LIMIT = 1024


def _record_packer(key: int, body_len: int, topic_len: int, props_len: int) -> Callable[..., None]:
    if len(_RECORD_PACKERS) >= _RECORD_PACKERS_LIMIT:
        _RECORD_PACKERS.clear()  # many distinct lengths: rebuilt on demand, never unbounded
    packer = _RECORD_PACKERS[key] = struct.Struct(
        f">iiiiiqq48si{body_len}s{topic_len}sh{props_len}s"
    ).pack_into
    return packer


def _no_packer(*args: object) -> None:
    raise AssertionError("a record packed before its packer was looked up")


def write_batch_records_py(
    view: memoryview,
    pos: int,
    base: int,
    elements: list[tuple[int, bytes, str]],
    header_props: bytes,
    topic_part: bytes,
    queue_id: int,
    sys_flag: int,
    born_timestamp: int,
    born: bytes,
    born_port: int,
    now: int,
    store: bytes,
    store_port: int,
    reconsume: int,
    queue_offset: int,
    entries: bytearray,
    offsets: list[int],
    index_keys: list[tuple[str, int]] | None,
    topic: str,
) -> int:
    """Write each record of the batch at ``view[pos]`` (file starting at log offset
    ``base``) with its append-time fields; append its consume-queue entry to ``entries``, its
    physical offset to ``offsets`` and, when ``index_keys`` is not None, its KEYS and
    UNIQ_KEY index keys to ``index_keys``. Returns the position after the last record."""
    plain = (
        _PlainBatch.of(elements, header_props, topic_part, topic, index_keys is not None)
        if elements
        else None
    )
    if plain is not None and plain.fits(view, pos):
        return plain.write(
            view, pos, base, queue_id, sys_flag, born_timestamp, born, born_port, now, store,
            store_port, reconsume, queue_offset, entries, offsets, index_keys,
        )  # fmt: skip
    return _write_records_one_by_one(
        view, pos, base, elements, header_props, topic_part, queue_id, sys_flag,
        born_timestamp, born, born_port, now, store, store_port, reconsume, queue_offset,
        entries, offsets, index_keys, topic,
    )  # fmt: skip


# TOTALSIZE to BODYLEN of a record: its own fields around the batch's shared 48 bytes.
_RECORD_HEAD = struct.Struct(">iiiiiqq48si")
# A topic part and PROPERTIESLENGTH, per topic part length.
_TOPIC_TAILS: dict[int, Callable[[bytes, int], bytes]] = {}
_UNIQ_MARK = "\x02UNIQ_KEY\x01"
# A regular expression finds a two-character string in a batch's properties about three
# times faster than ``in`` does.
_NAME_ENDING_IN_S = re.compile("S\x01").search
_CRC_MASK = 0x7FFFFFFF
_NAME_ENDING_IN_S_BYTES = re.compile(b"S\x01").search
_UNIQ_MARK_BYTES = _UNIQ_MARK.encode()
# Per (elements, bytes before the mark, value length): the struct that reads every element's
# UNIQ_KEY mark and value out of a same-sized batch's joined properties (`_PlainBatch`).
_UNIQ_READERS: dict[tuple[int, int, int], Callable[[bytes], tuple[bytes, ...]]] = {}
_UNIQ_READERS_MAX_COUNT = 256


class _PlainBatch:
    """A plain batch, sized and ready to write a column at a time (the pure path).

    Plain is what producers send: no element holds TAGS or KEYS, the header's properties
    follow every element's the same way, and each element's UNIQ_KEY (when any has one) is
    its last piece. Each column (sizes, CRCs, offsets, heads, index keys) is then one call
    that loops in C (``map``, ``accumulate``, ``bytes.join``) instead of a pass of Python per
    record, and the records are copied into the file at once: the same bytes as
    `_write_records_one_by_one` (tests compare them)."""

    __slots__ = ("bodies", "body_lens", "encoded", "flags", "keys", "largest", "longest",
                 "props_lens", "same_sized", "sizes", "suffix", "topic_part", "total")  # fmt: skip

    def __init__(
        self,
        flags: tuple[int, ...],
        bodies: tuple[bytes, ...],
        encoded: Sequence[bytes],
        suffix: bytes,
        keys: list[str] | None,
        topic_part: bytes,
        same_sized: bool,
    ) -> None:
        self.flags = flags
        self.bodies = bodies
        self.encoded = encoded
        self.suffix = suffix
        self.keys = keys
        self.topic_part = topic_part
        extra = len(suffix)
        fixed = 90 + len(topic_part)
        self.same_sized = same_sized
        if same_sized:  # every body one length, every properties one length: no column to sum
            count = len(bodies)
            props_len = len(encoded[0]) + extra
            body_len = len(bodies[0])
            size = fixed + body_len + props_len
            self.props_lens = [props_len] * count
            self.body_lens = [body_len] * count
            self.sizes = [size] * count
            self.total = size * count
            self.longest = props_len
            self.largest = size
            return
        self.props_lens = list(map(add, map(len, encoded), repeat(extra)))
        self.body_lens = body_lens = list(map(len, bodies))
        self.sizes = list(map(add, map(add, body_lens, self.props_lens), repeat(fixed)))
        self.total = sum(self.sizes)
        #: The longest properties and the largest record, for the store's limits.
        self.longest = max(self.props_lens)
        self.largest = max(self.sizes)

    @classmethod
    def of(
        cls,
        elements: list[tuple[int, bytes, str]],
        header_props: bytes,
        topic_part: bytes,
        topic: str,
        with_keys: bool,
    ) -> _PlainBatch | None:
        """The batch sized, with its UNIQ_KEY index keys when ``with_keys``; None when it is
        not plain."""
        encoded: Sequence[bytes] | None
        if type(elements) is SameSizedElements:  # columns and raw properties as decoded
            plain = cls._of_same_sized(elements, header_props, topic_part, topic, with_keys)
            if plain is not False:
                return plain
            flags, bodies = elements.flags, elements.bodies
            props_strs: Sequence[str] = elements.properties
            encoded = elements.raw_properties
        else:
            flags, bodies, props_strs = zip(*elements, strict=True)
            encoded = None
        joined = "".join(props_strs)
        if _NAME_ENDING_IN_S(joined):
            return None  # perhaps TAGS or KEYS (or only a name ending in S): one by one
        keys: list[str] | None = None
        suffix: bytes | None
        if "UNIQ_KEY\x01" in joined:
            # Each element's last "\x02UNIQ_KEY\x01" piece, when it ends the string with a
            # value: then no element is empty or ends with a separator either.
            pieces = list(map(str.rpartition, props_strs, repeat(_UNIQ_MARK)))
            values = list(map(_THIRD, pieces))
            if not all(map(_SECOND, pieces)) or not all(values) or "\x02" in "".join(values):
                return None
            if with_keys:
                keys = list(map(f"{topic}#".__add__, values))
            suffix = b"\x02" + header_props if header_props else b""
        else:
            suffix = _header_suffix(props_strs, joined, header_props)
            if suffix is None:
                return None
        if encoded is None:
            plain = cls(
                flags, bodies, list(map(str.encode, props_strs)), suffix, keys, topic_part, False
            )
        else:
            plain = cls(flags, bodies, encoded, suffix, keys, topic_part, True)
        # PROPERTIESLENGTH must hold it (else the one-by-one write refuses the record).
        return plain if plain.longest <= 0x7FFF else None

    @classmethod
    def _of_same_sized(
        cls,
        elements: SameSizedElements,
        header_props: bytes,
        topic_part: bytes,
        topic: str,
        with_keys: bool,
    ) -> _PlainBatch | Literal[False] | None:
        """`of` of a producer's same-sized batch whose UNIQ_KEYs all sit at one place, read
        from the raw properties: one scan of them joined, and one struct that reads every
        element's last UNIQ_KEY mark and value (no string per piece). False when the batch
        is not like that: `of` then reads it from the decoded strings."""
        encoded = elements.raw_properties
        raw = b"".join(encoded)
        if _NAME_ENDING_IN_S_BYTES(raw):
            return None  # as `of`: perhaps TAGS or KEYS (UTF-8 keeps ASCII bytes as they are)
        if b"UNIQ_KEY\x01" not in raw:
            return False
        first = encoded[0]
        _, mark, value = first.rpartition(_UNIQ_MARK_BYTES)
        if not mark or not value:
            return None  # as `of`: the first element has no UNIQ_KEY piece last, with a value
        count = len(encoded)
        shape = (count, len(first) - len(value) - len(mark), len(value))
        read = _UNIQ_READERS.get(shape)
        if read is None:
            if count > _UNIQ_READERS_MAX_COUNT:
                return False
            if len(_UNIQ_READERS) >= 64:
                _UNIQ_READERS.clear()
            read = _UNIQ_READERS[shape] = struct.Struct(
                f"{shape[1]}x{len(mark)}s{len(value)}s" * count
            ).unpack
        found = read(raw)
        values = found[1::2]
        # Each element's mark where the first's is, and no separator after it: that mark is
        # its last one, and its value what follows (else the strings decide).
        if found[0::2].count(mark) != count or b"\x02" in b"".join(values):
            return False
        keys = _index_keys(topic, values, count) if with_keys else None
        suffix = b"\x02" + header_props if header_props else b""
        plain = cls(elements.flags, elements.bodies, encoded, suffix, keys, topic_part, True)
        return plain if plain.longest <= 0x7FFF else None

    def fits(self, view: memoryview, pos: int) -> bool:
        """Whether the records fit ``view`` from ``pos`` (else the one-by-one write writes
        those that fit, then refuses)."""
        return pos + self.total <= len(view)

    def write(
        self,
        view: memoryview,
        pos: int,
        base: int,
        queue_id: int,
        sys_flag: int,
        born_timestamp: int,
        born: bytes,
        born_port: int,
        now: int,
        store: bytes,
        store_port: int,
        reconsume: int,
        queue_offset: int,
        entries: bytearray,
        offsets: list[int],
        index_keys: list[tuple[str, int]] | None,
    ) -> int:
        """`write_batch_records_py` of the batch, which fits ``view`` from ``pos``."""
        flags = self.flags
        if self.same_sized and len(flags) <= _UNIFORM_MAX and flags.count(flags[0]) == len(flags):
            return self._write_uniform(
                view, pos, base, queue_id, sys_flag, born_timestamp, born, born_port, now,
                store, store_port, reconsume, queue_offset, entries, offsets, index_keys,
            )  # fmt: skip
        sizes = self.sizes
        bodies = self.bodies
        phys = list(accumulate(sizes, initial=base + pos))
        end: int = phys.pop() - base
        n = len(sizes)
        shared = _BATCH_FIELDS.pack(
            sys_flag, born_timestamp, born, born_port, now, store, store_port, reconsume, 0
        )
        crcs = map(and_, map(crc32, bodies), repeat(_CRC_MASK))
        heads = map(_RECORD_HEAD.pack, sizes, repeat(_MAGIC_CODE), crcs, repeat(queue_id),
                    self.flags, range(queue_offset, queue_offset + n), phys, repeat(shared),
                    self.body_lens)  # fmt: skip
        topic_part = self.topic_part
        tail = _TOPIC_TAILS.get(len(topic_part))
        if tail is None:
            tail = _TOPIC_TAILS[len(topic_part)] = struct.Struct(f">{len(topic_part)}sh").pack
        tails = (
            repeat(tail(topic_part, self.props_lens[0]))
            if self.same_sized
            else map(tail, repeat(topic_part), self.props_lens)
        )
        view[pos:end] = b"".join(
            chain.from_iterable(zip(heads, bodies, tails, self.encoded, repeat(self.suffix)))
        )
        offsets += phys
        entries += b"".join(map(ENTRY.pack, phys, sizes, repeat(0)))
        keys = self.keys
        if keys is not None and index_keys is not None:
            index_keys.extend(zip(keys, phys, strict=True))
        return end


    def _write_uniform(
        self,
        view: memoryview,
        pos: int,
        base: int,
        queue_id: int,
        sys_flag: int,
        born_timestamp: int,
        born: bytes,
        born_port: int,
        now: int,
        store: bytes,
        store_port: int,
        reconsume: int,
        queue_offset: int,
        entries: bytearray,
        offsets: list[int],
        index_keys: list[tuple[str, int]] | None,
    ) -> int:
        """`write` of a batch whose records are all one size with one FLAG (a producer's
        batch of equal bodies): every record is the same bytes but for its CRC, queue offset,
        physical offset, body and properties. The rest are the same objects, set into the
        list of fields a column at a time (a list's strided assignment), and one struct per
        batch shape packs them all straight into the file (no joined copy of the batch in
        between). The consume-queue entries, an arithmetic progression, come out of one sum
        of big ints."""
        bodies = self.bodies
        count = len(bodies)
        size = self.sizes[0]
        start = base + pos
        phys = range(start, start + count * size, size)
        end = pos + count * size
        shared = _BATCH_FIELDS.pack(
            sys_flag, born_timestamp, born, born_port, now, store, store_port, reconsume, 0
        )
        size_magic = _SIZE_MAGIC(size, _MAGIC_CODE)
        suffix = self.suffix
        body_len = self.body_lens[0]
        tail = self.topic_part + _SHORT(self.props_lens[0])
        encoded = self.encoded
        # Nine fields a record: BODYCRC, QUEUEID and FLAG, QUEUEOFFSET, PHYSICALOFFSET, the
        # shared 48 bytes and BODYLEN, BODY, the topic part and PROPERTIESLENGTH, PROPERTIES,
        # and the suffix with the next record's TOTALSIZE and MAGICCODE (the last: the suffix
        # alone).
        fields: list[bytes | int] = [suffix + size_magic] * (9 * count + 1)
        fields[0] = size_magic
        fields[1::9] = list(map(and_, map(crc32, bodies), repeat(_CRC_MASK)))
        fields[2::9] = [_QUEUE_FLAG(queue_id, self.flags[0])] * count
        fields[3::9] = range(queue_offset, queue_offset + count)
        fields[4::9] = phys
        fields[5::9] = [_SHARED_BODY_LEN(shared, body_len)] * count
        fields[6::9] = bodies
        fields[7::9] = [tail] * count
        fields[8::9] = encoded
        fields[-1] = suffix
        _uniform_packer(count, body_len, len(tail), len(encoded[0]), len(suffix))(
            view, pos, *fields
        )
        offsets += phys
        entries += _entry_lanes(count, size, start)
        keys = self.keys
        if keys is not None and index_keys is not None:
            index_keys.extend(zip(keys, phys, strict=True))
        return end


# `_PlainBatch._write_uniform`'s pieces: TOTALSIZE and MAGICCODE; QUEUEID and FLAG; the
# batch's shared 48 bytes and BODYLEN; PROPERTIESLENGTH.
_SIZE_MAGIC = struct.Struct(">ii").pack
_QUEUE_FLAG = struct.Struct(">ii").pack
# The most records a uniform write packs with one struct (longer batches: `write`'s pieces).
_UNIFORM_MAX = 256
# Per (records, body, topic part and PROPERTIESLENGTH, properties, suffix lengths): the
# struct that packs a uniform batch's fields into the file (a producer's batches mostly
# share one shape; 64 shapes of 256 records hold about 5 MB).
_UNIFORM_PACKERS: dict[tuple[int, int, int, int, int], Callable[..., None]] = {}


def _uniform_packer(
    count: int, body_len: int, tail_len: int, props_len: int, suffix_len: int
) -> Callable[..., None]:
    """The cached ``pack_into`` of `_PlainBatch._write_uniform`'s fields for this shape."""
    key = (count, body_len, tail_len, props_len, suffix_len)
    packer = _UNIFORM_PACKERS.get(key)
    if packer is None:
        if len(_UNIFORM_PACKERS) >= 64:
            _UNIFORM_PACKERS.clear()
        record = f"I8sqq52s{body_len}s{tail_len}s{props_len}s"
        packer = _UNIFORM_PACKERS[key] = struct.Struct(
            f">8s{f'{record}{suffix_len + 8}s' * (count - 1)}{record}{suffix_len}s"
        ).pack_into
    return packer


_SHARED_BODY_LEN = struct.Struct(">48si").pack
_SHORT = struct.Struct(">h").pack
# Per (records, size): the consume-queue entries of records at offsets 0, size, 2 * size, ...
# as one big int, and the lanes of their first offset (an entry is 160 bits: the offset in
# its top 64). Entries at offset ``start`` on are ``start * lanes + entries``.
_ENTRY_LANES: dict[tuple[int, int], tuple[int, int]] = {}


def _entry_lanes(count: int, size: int, start: int) -> bytes:
    """The consume-queue entries (offset, size, tags code 0) of ``count`` records of ``size``
    bytes each, the first at commit-log offset ``start``: ``ENTRY.pack`` of each, joined."""
    if count > 1024:  # lanes that long would hold much memory in the cache
        return b"".join(map(ENTRY.pack, range(start, start + count * size, size),
                            repeat(size), repeat(0)))  # fmt: skip
    cached = _ENTRY_LANES.get((count, size))
    if cached is None:
        if len(_ENTRY_LANES) >= 256:
            _ENTRY_LANES.clear()
        ones = sum(1 << (160 * k) for k in range(count))
        ascending = sum((count - 1 - k) << (160 * k) for k in range(count))
        cached = _ENTRY_LANES[count, size] = (
            ones << 96, ((size << 64) * ones) + ((size << 96) * ascending)
        )  # fmt: skip
    lanes, entries = cached
    return (start * lanes + entries).to_bytes(20 * count, "big")


def _header_suffix(props_strs: Sequence[str], joined: str, header_props: bytes) -> bytes | None:
    """What follows every element's properties in its record (``joined`` is theirs joined):
    the header's properties, after a separator when the element's do not end with one; None
    when that is not the same for every element."""
    if not header_props:
        return b""
    if not joined:
        return header_props
    # No element empty, none ending in a separator (one joined scan: a separator followed by
    # the joint, or a last one; a value holding both only sends the batch the long way).
    if (
        all(props_strs)
        and props_strs[-1][-1] != "\x02"
        and "\x02\x03" not in "\x03".join(props_strs)
    ):
        return b"\x02" + header_props
    return None


_SECOND = itemgetter(1)
_THIRD = itemgetter(2)


def _index_keys(topic: str, values: tuple[bytes, ...], count: int) -> list[str]:
    """``<topic>#<value>`` of each UTF-8 value: joined with a NUL between, decoded once and
    split (half the time of a decode and a concatenation per value), unless a value holds a
    NUL itself (then the split gives more than ``count`` pieces)."""
    prefix = f"{topic}#"
    encoded = prefix.encode()
    keys = (encoded + (b"\x00" + encoded).join(values)).decode().split("\x00")
    if len(keys) == count:
        return keys
    return list(map(prefix.__add__, map(bytes.decode, values)))


def _write_records_one_by_one(
    view: memoryview,
    pos: int,
    base: int,
    elements: list[tuple[int, bytes, str]],
    header_props: bytes,
    topic_part: bytes,
    queue_id: int,
    sys_flag: int,
    born_timestamp: int,
    born: bytes,
    born_port: int,
    now: int,
    store: bytes,
    store_port: int,
    reconsume: int,
    queue_offset: int,
    entries: bytearray,
    offsets: list[int],
    index_keys: list[tuple[str, int]] | None,
    topic: str,
) -> int:
    """`write_batch_records_py` of any batch, a record at a time."""
    pack_entry = ENTRY.pack
    packers = _RECORD_PACKERS
    shared = _BATCH_FIELDS.pack(
        sys_flag, born_timestamp, born, born_port, now, store, store_port, reconsume, 0
    )
    topic_len = len(topic_part)
    fixed = 90 + topic_len
    limit = len(view)
    cq_entries: list[bytes] = []
    add_entry = cq_entries.append
    add_offset = offsets.append
    add_key = None if index_keys is None else index_keys.append
    prefix = f"{topic}#"
    last_key = -1  # no record's key: the first record looks its packer up
    packer = _no_packer
    try:
        for flag, body, element_props in elements:
            properties = element_props.encode()
            if header_props:
                if properties and properties[-1] != 2:
                    properties += b"\x02"
                properties += header_props
            body_len = len(body)
            props_len = len(properties)
            size = fixed + body_len + props_len
            if pos + size > limit:
                raise ValueError(f"a batch record of {size} bytes at {pos} overruns the file")
            # Lengths below 2**24 (body), 2**16 (properties) and 2**8 (topic part) by the
            # size checks before: the key is unique.
            key = (body_len << 24) | (props_len << 8) | topic_len
            if key != last_key:
                packer = packers.get(key) or _record_packer(key, body_len, topic_len, props_len)
                last_key = key
            phys = base + pos
            packer(view, pos, size, _MAGIC_CODE, crc32(body) & 0x7FFFFFFF, queue_id, flag,
                   queue_offset, phys, shared, body_len, body, topic_part, props_len,
                   properties)  # fmt: skip
            pos += size
            queue_offset += 1
            add_offset(phys)
            # The dispatch takes TAGS, KEYS and UNIQ_KEY from the element's own properties. A
            # producer's usual ones hold neither TAGS nor KEYS: its UNIQ_KEY is read in place
            # (`_last_uniq_key` inlined for its usual case: a call per record costs more).
            # (Neither name when no name ends in S: one search instead of two for most.)
            if "S\x01" not in element_props or (
                "TAGS\x01" not in element_props and "KEYS\x01" not in element_props
            ):
                add_entry(pack_entry(phys, size, 0))
                if add_key is None:
                    continue
                at = element_props.rfind("\x02UNIQ_KEY\x01") + 10
                if at >= 10:
                    stop = element_props.find("\x02", at)
                    uniq = element_props[at:stop] if stop >= 0 else element_props[at:]
                    if uniq:
                        add_key((prefix + uniq, phys))
                        continue
                elif "UNIQ_KEY\x01" not in element_props:
                    continue
                parsed = _last_uniq_key(element_props) or split_properties(element_props).get(
                    "UNIQ_KEY"
                )
                if parsed:
                    add_key((prefix + parsed, phys))
                continue
            props = split_properties(element_props)
            tags = props.get("TAGS")
            add_entry(pack_entry(phys, size, hash_tags(tags) if tags else 0))
            if index_keys is not None:
                keys = props.get("KEYS")
                if keys:
                    index_keys.extend((prefix + k, phys) for k in keys.split(" ") if k)
                uniq_key = props.get("UNIQ_KEY")
                if uniq_key:
                    index_keys.append((prefix + uniq_key, phys))
    finally:
        # Also when a record overran: the entries of the records written before it.
        entries += b"".join(cq_entries)
    return pos


def _last_uniq_key(properties: str) -> str | None:
    """The value of the last UNIQ_KEY piece of ``properties``, read without parsing them;
    None when it is not plainly there (the caller then parses).

    A piece starts the string or follows a ``\x02``, and no value holds a ``\x02``, so the
    last ``\x02UNIQ_KEY\x01`` starts the last UNIQ_KEY piece, which wins when its value is
    not empty (an empty one is dropped and an earlier piece may win)."""
    at = properties.rfind("\x02UNIQ_KEY\x01")
    if at >= 0:
        at += 10
    elif properties.startswith("UNIQ_KEY\x01"):
        at = 9
    else:
        return None
    stop = properties.find("\x02", at)
    return (properties[at:] if stop < 0 else properties[at:stop]) or None


#: What `append_batch` runs: the compiled twins when ``./dev build-ext`` built them, else the
#: pure-Python ones above (the same bytes; tests compare them).
batch_records_size = batch_records_size_py
write_batch_records = write_batch_records_py
try:  # an extension built before these functions lacks them: ImportError too
    from protocol._speedups import batch_records_size, write_batch_records
except ImportError:
    pass
