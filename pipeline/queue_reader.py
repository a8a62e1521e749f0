"""Reading one planned range on an executor: PULL_MESSAGE from the queue's broker until the
range's end, never past it.

Each pull asks for at most ``pullBatchSize`` messages and never more than the range has left,
so the broker never sends messages beyond the end. The pulls subscribe to ``*`` (no tag
filter) as a group that never commits an offset: a read leaves no trace in the brokers'
consumer offsets.

A broker answer that moves the offset on without handing over the messages in between means
those messages are gone: retention deleted them after the read was planned (PULL_OFFSET_MOVED
to the new min offset, a gap inside an answer), or the queue now ends before the planned end.
With failOnDataLoss that fails the task, naming the queue and the offsets; without it a
warning names them and the read goes on.
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Any

import anyio

from client import ClientInstance, MQClientError
from pipeline.errors import DataLossError
from pipeline.planning import QueueRange
from pipeline.schema import message_row
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    PullSysFlag,
    decode_header,
    encode_header,
)
from protocol.message import Buffer, decode_records

log = logging.getLogger("boltmq.pipeline")

READER_GROUP = "boltmq-spark-reader"
"""The consumer group the pulls name (brokers create it on first use; it commits nothing)."""

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
    ) -> None:
        self.range = queue_range
        self.pull_batch_size = pull_batch_size
        self.fail_on_data_loss = fail_on_data_loss
        self.instance = ClientInstance(namesrv_addr, timeout=_PULL_TIMEOUT)
        #: The next offset to read.
        self.offset = queue_range.start
        #: Messages the broker no longer had (only with failOnDataLoss false).
        self.lost = 0

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
            if code == ResponseCode.SUCCESS and response.body:
                rows = self._rows(response.body)
                if rows:
                    return rows
            moved_to = min(answer.next_begin_offset, part.end)
            if moved_to > self.offset:
                # Moved on with nothing handed over: [offset, moved_to) is no longer there.
                self._lost(self.offset, moved_to, f"the broker moved the read on to "
                           f"{answer.next_begin_offset} (min offset now {answer.min_offset})")
                self.offset = moved_to
                retry_until = None
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

    def _rows(self, body: Buffer) -> list[tuple[Any, ...]]:
        part = self.range
        rows = []
        for message in decode_records(body):
            offset = message.queue_offset
            if offset < self.offset:
                continue  # an answer never starts before the offset asked; be safe anyway
            if offset >= part.end:
                break
            if offset > self.offset:
                self._lost(self.offset, offset, "a gap in the broker's answer")
            rows.append(message_row(message, part.broker_name))
            self.offset = offset + 1
        return rows

    async def _pull(self, offset: int, count: int) -> RemotingCommand:
        part = self.range
        header = PullMessageRequestHeader(
            consumer_group=READER_GROUP, topic=part.topic, queue_id=part.queue_id,
            queue_offset=offset, max_msg_nums=count, sys_flag=int(PullSysFlag.SUBSCRIPTION),
            commit_offset=0, suspend_timeout_millis=0, subscription="*", sub_version=0,
            expression_type="TAG",
        )  # fmt: skip
        request = RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header))
        return await self.instance.invoke_broker(part.address, request)

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
