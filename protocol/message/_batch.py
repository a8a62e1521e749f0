"""Batch bodies (SEND_BATCH_MESSAGE, sheet 5.9): the messages of one send, each with its own
flag, body and properties.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from protocol.message._format import MAX_PROPERTIES_BYTES, Buffer, MessageFormatError

_SHORT = struct.Struct(">h")
_BATCH_HEAD = struct.Struct(">iiiii")  # TOTALSIZE MAGIC BODYCRC FLAG BODYLEN
# TOTALSIZE, FLAG and BODYLEN: a broker ignores the magic and CRC a client writes as 0.
_ELEMENT_HEAD = struct.Struct(">i8xii")


@attrs.define(slots=True)
class BatchElement:
    """One message of a batch body: its flag, body and own properties string."""

    flag: int
    body: bytes
    properties: str = ""


def encode_batch(elements: Iterable[BatchElement]) -> bytes:
    """A SEND_BATCH_MESSAGE body (sheet 5.9); magic and CRC are written as 0, as clients do."""
    return encode_batch_tuples((e.flag, e.body, e.properties) for e in elements)


def encode_batch_tuples(elements: Iterable[tuple[int, Buffer, str]]) -> bytes:
    """`encode_batch` of plain (flag, body, properties) tuples: the producer's send path."""
    parts: list[Buffer] = []
    append = parts.append
    pack_head = _BATCH_HEAD.pack
    pack_short = _SHORT.pack
    for flag, body, properties in elements:
        props = properties.encode()
        props_len = len(props)
        if props_len > MAX_PROPERTIES_BYTES:
            raise MessageFormatError(f"batch element properties of {props_len} bytes too long")
        body_len = len(body)
        append(pack_head(22 + body_len + props_len, 0, 0, flag, body_len))
        append(body)  # join copies it once; no bytes() copy before
        append(pack_short(props_len) + props)
    return b"".join(parts)


def decode_batch(body: Buffer) -> list[BatchElement]:
    """Split a batch body into its elements; MessageFormatError on any inconsistency."""
    return [BatchElement(*element) for element in decode_batch_tuples(body)]


def decode_batch_tuples_py(body: Buffer) -> list[tuple[int, bytes, str]]:
    """`decode_batch` as plain (flag, body, properties) tuples: the broker's send path."""
    elements: list[tuple[int, bytes, str]] = []
    append = elements.append
    unpack_head = _ELEMENT_HEAD.unpack_from
    # Slices of bytes: one copy each and no memoryview object per field (a frame's body is
    # bytes already; anything else is copied once here).
    data = body if type(body) is bytes else bytes(body)
    pos = 0
    end = len(data)
    if end >= 22:
        same = _decode_same_sized(data, end)
        if same is not None:
            return same
    try:
        while pos < end:
            total, flag, body_len = unpack_head(data, pos)
            props_at = pos + 20 + body_len
            next_pos = pos + total
            props_len = next_pos - props_at - 2
            # One test of a well-formed element (the properties' length as TOTALSIZE says it,
            # as the two bytes say it read unsigned); anything else is found and named by
            # `_decode_batch_checked`, which reads the body again.
            if (
                not (body_len >= 0 and 0 <= props_len <= 0x7FFF and next_pos <= end)
                or (data[props_at] << 8) | data[props_at + 1] != props_len
            ):
                break
            append((flag, data[pos + 20 : props_at], data[props_at + 2 : next_pos].decode()))
            pos = next_pos
        else:
            return elements
    except (struct.error, UnicodeDecodeError):
        pass
    return _decode_batch_checked(data)


class SameSizedElements(list[tuple[int, bytes, str]]):
    """The elements of a batch whose elements all have one body length and one properties
    length, as `_decode_same_sized` read them, with the columns it read them into: the
    broker's pure batch write (`storage.inline_batch`) takes these instead of taking the
    tuples apart and encoding the properties again. The list holds the same tuples as any
    decode; a list made from it (a batch with duplicates dropped) is a plain list."""

    def __init__(
        self,
        flags: tuple[int, ...],
        bodies: tuple[bytes, ...],
        raw_properties: tuple[bytes, ...],
        properties: list[str],
    ) -> None:
        super().__init__(zip(flags, bodies, properties, strict=True))
        self.flags = flags
        self.bodies = bodies
        #: Each element's properties as sent (UTF-8), and as decoded.
        self.raw_properties = raw_properties
        self.properties = properties


# Per (elements, body length, properties length): the unpack of a whole same-sized batch of
# up to _FLAT_MAX elements (a producer's batches mostly hold 32; 64 shapes of 256 take ~3 MB).
_FLAT_MAX = 256
_BATCH_READERS: dict[tuple[int, int, int], Callable[[bytes], tuple[Any, ...]]] = {}


def _decode_same_sized(data: bytes, end: int) -> list[tuple[int, bytes, str]] | None:
    """`decode_batch_tuples_py` of a batch whose elements all have the first one's body and
    properties lengths (a producer's batch of equal bodies), a column at a time: one
    ``struct.iter_unpack`` reads every element, each column is checked by one count and the
    properties decoded by one ``map``. None when the batch is not like that (or not well
    formed: the element by element read then finds what is wrong)."""
    total, _, body_len = _ELEMENT_HEAD.unpack_from(data, 0)
    count, rest = divmod(end, total) if total >= 22 else (0, 1)
    if rest or count < 2 or body_len < 0 or body_len > total - 22:
        return None
    props_len = total - 22 - body_len
    # One struct reads the whole batch into one flat tuple; each column is a strided slice
    # of it (no tuple per element, no transposition).
    element = f"i8xii{body_len}sH{props_len}s"
    if count <= _FLAT_MAX:
        shape = (count, body_len, props_len)
        unpack = _BATCH_READERS.get(shape)
        if unpack is None:
            if len(_BATCH_READERS) >= 64:
                _BATCH_READERS.clear()
            unpack = _BATCH_READERS[shape] = struct.Struct(">" + element * count).unpack
        flat = unpack(data)
        totals, flags, body_lens = flat[0::6], flat[1::6], flat[2::6]
        bodies, props_lens, props = flat[3::6], flat[4::6], flat[5::6]
    else:  # a struct of that many fields would hold much memory in the cache
        rows = list(struct.iter_unpack(">" + element, data))
        totals, flags, body_lens, bodies, props_lens, props = zip(*rows, strict=True)
    if (
        props_len > 0x7FFF
        or totals.count(total) != count
        or body_lens.count(body_len) != count
        or props_lens.count(props_len) != count
    ):
        return None
    try:
        return SameSizedElements(flags, bodies, props, list(map(bytes.decode, props)))
    except UnicodeDecodeError:
        return None


def _decode_batch_checked(data: bytes) -> list[tuple[int, bytes, str]]:
    """`decode_batch_tuples_py` checking each size on its own: MessageFormatError naming what
    is wrong where."""
    elements: list[tuple[int, bytes, str]] = []
    append = elements.append
    unpack_head = _ELEMENT_HEAD.unpack_from
    pos = 0
    end = len(data)
    while pos < end:
        if pos + 22 > end:
            raise MessageFormatError(f"batch element at offset {pos} is cut short")
        total, flag, body_len = unpack_head(data, pos)
        props_at = pos + 20 + body_len
        next_pos = pos + total
        # The properties' length as TOTALSIZE says it, checked against the two bytes that
        # say it (read unsigned: a length above 0x7FFF is a negative short on the wire).
        props_len = next_pos - props_at - 2
        if body_len < 0 or props_at + 2 > end:
            raise MessageFormatError(
                f"batch element at offset {pos}: body length {body_len} overruns the body"
            )
        if (data[props_at] << 8) | data[props_at + 1] != props_len or props_len > 0x7FFF:
            raise MessageFormatError(f"batch element at offset {pos}: inconsistent sizes")
        if next_pos > end:
            raise MessageFormatError(f"batch element at offset {pos} overruns the body")
        if props_len:
            try:
                props = data[props_at + 2 : next_pos].decode()
            except UnicodeDecodeError as exc:
                raise MessageFormatError(f"batch element at offset {pos}: {exc}") from exc
        else:
            props = ""
        append((flag, data[pos + 20 : props_at], props))
        pos = next_pos
    return elements


#: What `decode_batch_tuples` runs: the compiled twin when ``./dev build-ext`` built it, else
#: the pure-Python `decode_batch_tuples_py` above (same results, same errors; tests compare).
decode_batch_tuples: Callable[[Buffer], list[tuple[int, bytes, str]]] = decode_batch_tuples_py
try:  # an extension built before these functions lacks them: ImportError too
    from protocol._speedups import bind_batch, decode_batch_tuples
except ImportError:
    pass
else:
    bind_batch(decode_batch_tuples_py)
