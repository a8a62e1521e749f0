"""A pull's read of one consume queue, shared by the file and the memory store.

`offset_out_of_range` answers a queue offset with nothing to read at it (RocketMQ's
getMessage statuses); `read_entries` walks a slice of 20-byte consume-queue entries and takes
the records they name, filtered by tags code (and, for SQL92, by the record's properties),
within the pull's count and byte limits. The stores differ only in where a record's bytes
come from (`get_data`) and what a record no longer there means (`skip_to`), so the walk is
written once.
"""

from __future__ import annotations

from collections.abc import Callable, Set

from storage.consume_queue import CQ_STORE_UNIT_SIZE, ENTRY
from storage.results import GetMessageResult, GetMessageStatus
from storage.store_api import MAX_TRANSFER_COUNT_ON_MESSAGE_IN_MEMORY

__all__ = ["offset_out_of_range", "read_entries"]


def offset_out_of_range(offset: int, min_offset: int, max_offset: int) -> GetMessageResult | None:
    """The answer for ``offset`` when the queue holds nothing there; None: read from it."""
    if max_offset == 0:
        return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, 0)
    if offset < min_offset:
        return GetMessageResult(
            GetMessageStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset
        )
    if offset == max_offset:
        return GetMessageResult(
            GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset
        )
    if offset > max_offset:
        return GetMessageResult(
            GetMessageStatus.OFFSET_OVERFLOW_BADLY, max_offset, min_offset, max_offset
        )
    return None


def read_entries(
    entries: bytes | memoryview,
    offset: int,
    min_offset: int,
    max_offset: int,
    *,
    max_msg_nums: int,
    max_total_bytes: int,
    tag_codes: Set[int] | None,
    get_data: Callable[[int, int], memoryview | None],
    skip_to: Callable[[int], int],
    record_filter: Callable[[memoryview], bool] | None = None,
) -> GetMessageResult:
    """The records named by ``entries`` (the queue's entries from ``offset`` on).

    ``get_data(physical offset, size)`` gives a record's bytes, or None when the store no
    longer holds them; ``skip_to(physical offset)`` then gives the commit-log offset below
    which every entry is gone too (-1: only that one). ``record_filter`` then judges each
    record's bytes (a SQL92 subscription reads its properties); a record it refuses is
    passed over like one of another tag. FOUND with at least one record;
    MESSAGE_WAS_REMOVING when the first ones were gone; else NO_MATCHED_MESSAGE.
    """
    result = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset, min_offset, max_offset)
    buffers = result.buffers
    queue_offsets = result.queue_offsets
    total = 0
    unpack = ENTRY.unpack_from
    next_file_start = -1
    pos = 0
    end = len(entries)
    removing = False
    while pos < end:
        phys, size, tags = unpack(entries, pos)
        if next_file_start >= 0 and phys < next_file_start:
            pos += CQ_STORE_UNIT_SIZE
            continue
        if buffers and (
            len(buffers) >= max_msg_nums
            or total + size > max_total_bytes
            or len(buffers) >= MAX_TRANSFER_COUNT_ON_MESSAGE_IN_MEMORY
        ):
            break
        pos += CQ_STORE_UNIT_SIZE
        if tag_codes is not None and tags not in tag_codes:
            continue
        data = get_data(phys, size)
        if data is None:
            if not buffers:
                removing = True
            next_file_start = skip_to(phys)
            continue
        if record_filter is not None and not record_filter(data):
            data.release()  # a view of a mapped file: let go of it at once, as release() does
            continue
        buffers.append(data)
        queue_offsets.append(offset + pos // CQ_STORE_UNIT_SIZE - 1)
        total += size
    result.next_begin_offset = offset + pos // CQ_STORE_UNIT_SIZE
    result.buffer_total_size = total
    if buffers:
        result.status = GetMessageStatus.FOUND
    elif removing:
        result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
    return result
