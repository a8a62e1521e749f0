"""What every part of the message format shares: the format error, magic codes, size limits,
SYSFLAG bits, body CRC and compression, and host addresses (4 or 16 bytes, then the port).
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import struct
import zlib

MAGIC_CODE = -626843481
"""0xDAA320A7 as a signed int: a message record."""
BLANK_MAGIC_CODE = -875286124
"""0xCBD43194 as a signed int: the end-of-file blank record."""

Host = tuple[str, int]
Buffer = bytes | bytearray | memoryview

# zlib-ng folds the CRC with the CPU's carry-less multiply: about 80 ns a KiB against 480 for
# the system zlib's, which every stored body pays once (a batch's bodies one after another).
# Same polynomial, same values; without its wheel (a platform it has none for), zlib's.
try:
    from zlib_ng.zlib_ng import crc32 as crc32
except ImportError:
    from zlib import crc32 as crc32

MAX_TOPIC_BYTES = 127
MAX_PROPERTIES_BYTES = 32767


class MessageFormatError(ValueError):
    """A record, batch body or message id that does not follow the format."""


class MessageSysFlag:
    """Bits of a record's SYSFLAG (sheet 5.5)."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_NOT_TYPE = 0x0
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    TRANSACTION_ROLLBACK = 0xC
    TRANSACTION_MASK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80
    COMPRESSION_TYPE_MASK = 0x700
    COMPRESSION_LZ4 = 0x100
    COMPRESSION_ZSTD = 0x200
    COMPRESSION_ZLIB = 0x300

    @staticmethod
    def transaction_value(sys_flag: int) -> int:
        """The transaction bits of ``sys_flag``."""
        return sys_flag & MessageSysFlag.TRANSACTION_MASK


# --- body ---------------------------------------------------------------------------------


def body_crc(body: Buffer) -> int:
    """BODYCRC: zlib CRC-32 of the stored body, masked to a non-negative int (sheet 5.8)."""
    return crc32(body) & 0x7FFFFFFF


def compress_body(body: Buffer, level: int = 5) -> bytes:
    """Zlib-wrapped deflate, as Java's Deflater and the C++ client write."""
    return zlib.compress(body, level)


def decompress_body(body: Buffer) -> bytes:
    """Inflate a zlib-wrapped body; MessageFormatError when it is not valid zlib."""
    try:
        return zlib.decompress(body)
    except zlib.error as exc:
        raise MessageFormatError(f"compressed body does not inflate: {exc}") from exc


# --- hosts --------------------------------------------------------------------------------

_V4_HOST = struct.Struct(">4si")
_V6_HOST = struct.Struct(">16si")


def _host_bytes(host: Host) -> bytes:
    """4 or 16 address bytes; an IPv4-mapped IPv6 address is written as IPv4."""
    address = host[0]
    try:
        ip = ipaddress.ip_address(address)
    except ValueError as exc:
        raise MessageFormatError(f"host {address!r} is not an IP address") from exc
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.packed


@functools.lru_cache(maxsize=4096)
def pack_host(host: Host) -> bytes:
    """A record's host field: 4 address bytes and the port, or 16 for IPv6."""
    # Cached: a broker packs the same few hosts for every record, and parsing is most of the cost.
    raw = _host_bytes(host)
    port = host[1]
    if len(raw) == 4:
        return _V4_HOST.pack(raw, port)
    return _V6_HOST.pack(raw, port)


def unpack_host(buf: Buffer, pos: int, v6: bool) -> tuple[Host, int]:
    """The host field at ``buf[pos]`` and the position after it."""
    if v6:
        raw, port = _V6_HOST.unpack_from(buf, pos)
        return (str(ipaddress.IPv6Address(bytes(raw))), port), pos + 20
    raw, port = _V4_HOST.unpack_from(buf, pos)
    return (socket.inet_ntoa(raw), port), pos + 8
