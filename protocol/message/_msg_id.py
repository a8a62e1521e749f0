"""Message ids (sheet 5.7): the broker's offset msg id (store host + commit-log offset) and the
client's UNIQ_KEY id (ip, pid, random, time in month, counter).
"""

from __future__ import annotations

import itertools
import os
import random
import socket
import struct
import time

from protocol.message._format import Host, MessageFormatError, pack_host, unpack_host

_LONG = struct.Struct(">q")


def offset_msg_id(host: Host, commit_log_offset: int) -> str:
    """Store host address + port + commit-log offset in upper-case hex (32 or 56 chars)."""
    return (pack_host(host) + _LONG.pack(commit_log_offset)).hex().upper()


def offset_msg_id_prefix(host: Host) -> str:
    """The host part of offset msg ids, to which a broker appends ``f"{offset:016X}"``."""
    return pack_host(host).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[Host, int]:
    """(store host, commit-log offset) of an offset msg id."""
    if len(msg_id) not in (32, 56):
        raise MessageFormatError(f"msg id {msg_id!r} has {len(msg_id)} characters, not 32 or 56")
    try:
        # fromhex skips whitespace; the byte count below refuses text with spaces in it
        raw = bytes.fromhex(msg_id)
    except ValueError as exc:
        raise MessageFormatError(f"msg id {msg_id!r} is not hex") from exc
    if len(raw) * 2 != len(msg_id):
        raise MessageFormatError(f"msg id {msg_id!r} is not hex")
    host, _ = unpack_host(raw, 0, len(raw) == 28)
    (offset,) = _LONG.unpack_from(raw, len(raw) - 8)
    return host, offset


class _UniqIdState:
    """Per-process fixed prefix and counter of client message ids (sheet 5.7)."""

    def __init__(self) -> None:
        try:
            ip = socket.inet_aton(socket.gethostbyname(socket.gethostname()))
        except OSError:
            ip = bytes([127, 0, 0, 1])
        self.prefix = ip + struct.pack(">HI", os.getpid() & 0xFFFF, random.getrandbits(32))
        self.prefix_hex = self.prefix.hex().upper()
        self.counter = itertools.count(random.getrandbits(16))
        self.month_start_ms = 0
        self.next_month_ms = 0

    def month_ms(self, now_ms: int) -> int:
        if now_ms >= self.next_month_ms:
            local = time.localtime(now_ms / 1000)
            start = time.mktime((local.tm_year, local.tm_mon, 1, 0, 0, 0, 0, 0, -1))
            year, month = (local.tm_year + 1, 1) if local.tm_mon == 12 else (
                local.tm_year, local.tm_mon + 1)  # fmt: skip
            self.month_start_ms = int(start * 1000)
            self.next_month_ms = int(time.mktime((year, month, 1, 0, 0, 0, 0, 0, -1)) * 1000)
        return now_ms - self.month_start_ms


_uniq_state: _UniqIdState | None = None


def _forget_uniq_state() -> None:
    global _uniq_state
    _uniq_state = None


# A forked child makes a prefix of its own (its pid differs) for its first id; checking the
# pid on every id instead cost a system call per message.
os.register_at_fork(after_in_child=_forget_uniq_state)


def create_uniq_id() -> str:
    """A client message id (UNIQ_KEY): ip, pid, random, ms in month, counter; 32 hex chars."""
    global _uniq_state
    state = _uniq_state
    if state is None:
        state = _uniq_state = _UniqIdState()
    month_ms = state.month_ms(time.time_ns() // 1_000_000) & 0xFFFFFFFF
    return f"{state.prefix_hex}{month_ms:08X}{next(state.counter) & 0xFFFF:04X}"
