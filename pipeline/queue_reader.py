"""Reading one planned range on an executor: PULL_MESSAGE from the queue's broker until the
range's end, never past it.

Each pull asks for at most ``pullBatchSize`` messages and never more than the range has left,
so the broker never sends messages beyond the end. The pulls subscribe to ``*``, or to the
read's tags (subExpression, a pushed-down filter on ``tags``), as a group that never commits
an offset: a read leaves no trace in the brokers' consumer offsets.

With tags the broker filters by the tag hash codes its consume queue keeps, so it skips the
other messages and moves the offset on over them; two tags can share a hash code, so each
message's tag is checked again here and only the read's tags become rows.

Without tags, a broker answer that moves the offset on without handing over the messages in
between means those messages are gone: retention deleted them after the read was planned
(PULL_OFFSET_MOVED to the new min offset, a gap inside an answer), or the queue now ends
before the planned end.
With tags, only offsets below the min offset the broker reports are gone; the others were
filtered. With failOnDataLoss a loss fails the task, naming the queue and the offsets; without
it a warning names them and the read goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from types import TracebackType
from typing import Any

import anyio

from client import ClientInstance, MQClientError
from pipeline.errors import DataLossError
from pipeline.planning import QueueRange
from pipeline.pulls import READER_GROUP, pull
from pipeline.schema import message_row
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import PullMessageResponseHeader, decode_header
from protocol.message import Buffer, MessageConst, MessageExt, decode_records

log = logging.getLogger("boltmq.pipeline")

__all__ = ["READER_GROUP", "QueueRangeReader"]

# How long a broker that keeps answering PULL_RETRY_IMMEDIATELY (a slave that may not serve
# reads, a commit-log file being removed) is asked again before the task fails.
_RETRY_DEADLINE = 30.0
_PULL_TIMEOUT = 10.0


class QueueRangeReader:
    """Pulls one `QueueRange`; ``async with`` opens the client, `next_rows` gives the rows of
    one pull at a time (None once the range is read)."""

    def __init__(
        self,
        queue_range: QueueRange,
        *,
        namesrv_addr: str,
        pull_batch_size: int,
        fail_on_data_loss: bool,
        tags: Collection[str] | None = None,
    ) -> None:
        self.range = queue_range
        self.tags = None if tags is None else frozenset(tags)
        self.pull_batch_size = pull_batch_size
        self.fail_on_data_loss = fail_on_data_loss
        self.instance = ClientInstance(namesrv_addr, timeout=_PULL_TIMEOUT)
        #: The next offset to read.
        self.offset = queue_range.start
        #: Messages the broker no longer had (only with failOnDataLoss false).
        self.lost = 0
        #: Messages the broker handed over (with tags, fewer than the range holds).
        self.pulled = 0

    async def __aenter__(self) -> QueueRangeReader:
        await self.instance.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.instance.__aexit__(exc_type, exc, tb)

    async def next_rows(self) -> list[tuple[Any, ...]] | None:
        """The rows of the next pull that returns messages; None once the range is read."""
        messages = await self.next_messages()
        if messages is None:
            return None
        broker_name = self.range.broker_name
        return [message_row(message, broker_name) for message in messages]

    async def next_messages(self) -> list[MessageExt] | None:
        """The messages of the next pull that returns any; None once the range is read."""
        part = self.range
        retry_until: float | None = None
        while self.offset < part.end:
            wanted = min(self.pull_batch_size, part.end - self.offset)
            response = await self._pull(self.offset, wanted)
            code = response.code
            if code not in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND,
                            ResponseCode.PULL_OFFSET_MOVED, ResponseCode.PULL_RETRY_IMMEDIATELY):
                raise MQClientError(
                    code, f"pull of {part.describe()} at offset {self.offset} from "
                          f"{part.address} refused: {response.remark}",
                )  # fmt: skip
            answer = decode_header(PullMessageResponseHeader, response.ext_fields)
            progressed = False
            if code == ResponseCode.SUCCESS and response.body:
                before = self.offset
                messages = self._messages(response.body, answer.min_offset)
                if messages:
                    return messages
                progressed = self.offset > before  # only other tags with the same hash code
            moved_to = min(answer.next_begin_offset, part.end)
            if moved_to > self.offset:
                # Moved on with nothing handed over: [offset, moved_to) is no longer there,
                # or, with tags, the broker filtered it (all but what is below its min offset).
                self._skipped(moved_to, answer.min_offset, f"the broker moved the read on to "
                              f"{answer.next_begin_offset} (min offset now {answer.min_offset})")
                self.offset = moved_to
                retry_until = None
                continue
            if progressed:
                continue
            if code == ResponseCode.PULL_RETRY_IMMEDIATELY:
                now = anyio.current_time()
                retry_until = retry_until or now + _RETRY_DEADLINE
                if now >= retry_until:
                    raise MQClientError(
                        code, f"pull of {part.describe()} at offset {self.offset} from "
                              f"{part.address}: the broker kept answering 'retry' for "
                              f"{_RETRY_DEADLINE:.0f} s ({response.remark})",
                    )  # fmt: skip
                await anyio.sleep(0.05)
                continue
            # Not found at an offset below the planned end: the queue now ends earlier than
            # it did when the read was planned (it was deleted and recreated).
            self._lost(self.offset, part.end,
                       f"the queue now ends at offset {answer.max_offset}")  # fmt: skip
            self.offset = part.end
        return None

    def _messages(self, body: Buffer, min_offset: int) -> list[MessageExt]:
        part = self.range
        tags = self.tags
        kept = []
        for message in decode_records(body):
            offset = message.queue_offset
            if offset < self.offset:
                continue  # an answer never starts before the offset asked; be safe anyway
            if offset >= part.end:
                # With tags the broker counts only matching messages, so its answer may
                # reach past the range: the range is read.
                self.offset = part.end
                break
            if offset > self.offset:
                self._skipped(offset, min_offset, "a gap in the broker's answer")
            self.pulled += 1
            self.offset = offset + 1
            if tags is not None and message.properties.get(MessageConst.TAGS) not in tags:
                continue  # another tag with the same hash code
            kept.append(message)
        return kept

    async def _pull(self, offset: int, count: int) -> RemotingCommand:
        part = self.range
        return await pull(self.instance, part.address, part.topic, part.queue_id, offset,
                          count, self.tags)  # fmt: skip

    def _skipped(self, to: int, min_offset: int, why: str) -> None:
        """The broker went from ``self.offset`` on to ``to`` without handing the messages in
        between over: all lost, or, with tags, those below its ``min_offset`` (it filtered
        the rest)."""
        if self.tags is None:
            self._lost(self.offset, to, why)
        elif min_offset > self.offset:
            self._lost(self.offset, min(to, min_offset), why)

    def _lost(self, start: int, end: int, why: str) -> None:
        part = self.range
        what = (
            f"{part.describe()}: messages [{start}, {end}) of the planned range "
            f"[{part.start}, {part.end}) can no longer be read ({why})"
        )
        if self.fail_on_data_loss:
            raise DataLossError(f"{what}. Set failOnDataLoss to false to read on without them.")
        self.lost += end - start
        log.warning("%s; skipped (failOnDataLoss is false)", what)
