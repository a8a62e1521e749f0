"""Transactional messages (sheet 3.9, 3.15): half messages, END_TRANSACTION and the check-back.

A producer sends a message with ``TRAN_MSG=true``; the broker stores it as a *half* message in
``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 (real topic and queue kept in ``REAL_TOPIC`` /
``REAL_QID``), where no consumer subscribes. The producer runs its local transaction and sends
END_TRANSACTION: COMMIT writes the message to its real topic and queue, ROLLBACK does not; both
write an *op* message (``RMQ_SYS_TRANS_OP_HALF_TOPIC``, tag ``d``, body = the half's queue
offset) that marks the half as resolved.

A half without an op message older than ``transactionTimeOut`` is *checked back*: every
``transactionCheckInterval`` the check service re-puts it (``TRANSACTION_CHECK_TIMES`` + 1) and
sends CHECK_TRANSACTION_STATE to a live producer of its group, which answers with
END_TRANSACTION for the re-put copy. After ``transactionCheckMax`` checks the half is discarded.
How far the scan has got (half and op queue offsets) is kept as the consumer offsets of the
system group ``CID_RMQ_SYS_TRANS``, so a restarted broker resumes where it stopped.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator

import attrs
import trio

from actors.broker.config import BrokerConfig
from actors.broker.ha import HighAvailability
from actors.broker.tables.clients import ClientManager
from actors.broker.tables.offsets import CommitOffsets, ConsumerOffsetManager
from actors.broker.tables.topics import PERM_RW, TopicManager
from protocol.codes import RequestCode, ResponseCode
from protocol.command import ConnectionClosedError, RemotingCommand, RemotingError
from protocol.connection import Connection
from protocol.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    decode_header,
    encode_header,
)
from protocol.message import (
    MessageConst,
    MessageExt,
    MessageFormatError,
    MessageSysFlag,
    decode_record,
    encode_record,
    properties_to_string,
)
from protocol.names import CID_RMQ_SYS_TRANS, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from storage import MessageExtBrokerInner, MessageStore, PutMessageResult

log = logging.getLogger("boltmq.broker.transaction")

#: Tag of op messages: the half they name is resolved ("removed").
REMOVE_TAG = "d"

_HOST_V6_BITS = MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6
_READ_BATCH = 32


def prepare_half_message(
    topics: TopicManager, properties: dict[str, str], topic: str, queue_id: int, sys_flag: int,
    batch: bool,
) -> tuple[str, int, int]:  # fmt: skip
    """The (topic, queue id, sysflag) a ``TRAN_MSG=true`` send is stored under.

    Records the real topic and queue in ``properties`` (DELAY and __STARTDELIVERTIME dropped;
    PGROUP and TRAN_MSG stay). Raises RemotingError for a transactional batch, which RocketMQ
    does not take either.
    """
    if batch:
        raise RemotingError(
            ResponseCode.MESSAGE_ILLEGAL,
            "a batch cannot be a transactional message; send each message on its own",
        )
    # Transactions and delays do not mix (the Java producer clears DELAY on such sends too);
    # left in, they would send the half itself through the schedule service.
    properties.pop(MessageConst.DELAY, None)
    properties.pop(MessageConst.START_DELIVER_TIME, None)
    properties[MessageConst.REAL_TOPIC] = topic
    properties[MessageConst.REAL_QID] = str(queue_id)
    topics.create_topic_in_send_back_nowait(TRANS_HALF_TOPIC, 1, PERM_RW)
    return TRANS_HALF_TOPIC, 0, sys_flag & ~MessageSysFlag.TRANSACTION_MASK


@attrs.frozen
class TransactionStatistics:
    """Counters of the transaction service."""

    commits: int
    rollbacks: int
    refused: int
    check_rounds: int
    checks_sent: int
    checks_unsent: int
    discarded: int


@attrs.frozen
class CheckRound:
    """What one pass of the check service did."""

    half_offset: int
    op_offset: int
    checked: int
    discarded: int


class TransactionalMessageService:
    """END_TRANSACTION and the check-back service of one broker; see the module docstring."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: MessageStore,
        topics: TopicManager,
        offsets: ConsumerOffsetManager,
        clients: ClientManager,
        ha: HighAvailability,
    ) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        #: The check's progress is kept as consumer offsets of `CID_RMQ_SYS_TRANS`.
        self.offsets = offsets
        #: Producers of a half's group, to check it back with.
        self.clients = clients
        #: A commit's final put goes through it (a SYNC_MASTER's wait for a slave).
        self.ha = ha
        self.counters = dict.fromkeys(
            ("commits", "rollbacks", "refused", "check_rounds", "checks_sent", "checks_unsent",
             "discarded"), 0,
        )  # fmt: skip
        self._check_lock = trio.Lock()

    # -- END_TRANSACTION ---------------------------------------------------------------------

    def end_transaction(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand | None:
        """Commit or roll back a half message (code 37, usually oneway).

        Plain function: checks inline, then chains the final put and the op put through the
        store writer's callbacks; the answer (when one is wanted) goes out after the op put.
        """
        config = self.config
        if config.is_slave:
            return request.response(
                ResponseCode.SLAVE_NOT_AVAILABLE,
                f"broker {config.broker_name} is a slave; end transactions on its master",
            )
        header = decode_header(EndTransactionRequestHeader, request.ext_fields)
        kind = header.commit_or_rollback
        if kind == MessageSysFlag.TRANSACTION_NOT_TYPE:
            # The producer does not know yet: the check service will ask again.
            return request.response(ResponseCode.SUCCESS)
        if kind not in (MessageSysFlag.TRANSACTION_COMMIT, MessageSysFlag.TRANSACTION_ROLLBACK):
            return self._refuse(
                request,
                f"commitOrRollback {kind} is none of 0 (unknown), 8 (commit), 12 (rollback)",
            )
        half, problem = self._find_half(header)
        if half is None:
            return self._refuse(request, problem)
        if header.from_transaction_check:
            log.info(
                "producer group %s answered the check of half message %s (queue offset %d): %s",
                header.producer_group, header.msg_id, half.queue_offset,
                "commit" if kind == MessageSysFlag.TRANSACTION_COMMIT else "rollback",
            )  # fmt: skip

        def answer(code: int, remark: str | None = None) -> None:
            if request.is_oneway or connection.closed:
                return
            try:
                connection.send(request.response(code, remark))
            except ConnectionClosedError:
                pass  # the producer went away; nothing to tell it

        def op_written(result: PutMessageResult) -> None:
            if not result.ok:
                # The half stays unresolved: the check service will ask the producer again.
                log.error("op message for half offset %d not stored: %s %s",
                          half.queue_offset, result.status, result.remark)  # fmt: skip
                answer(ResponseCode.SYSTEM_ERROR, f"op message not stored: {result.status}")
                return
            answer(ResponseCode.SUCCESS)

        if kind == MessageSysFlag.TRANSACTION_ROLLBACK:
            self.counters["rollbacks"] += 1
            self._put_op(half, op_written)
            return None
        final = self._final_message(half)
        if final is None:
            return self._refuse(
                request,
                f"half message at commit-log offset {half.commit_log_offset} has no REAL_TOPIC / "
                "REAL_QID; it cannot be committed",
            )

        def final_written(result: PutMessageResult) -> None:
            if not result.ok:
                answer(
                    ResponseCode.SYSTEM_ERROR,
                    result.remark or f"the store refused the committed message: {result.status}",
                )
                return
            self._put_op(half, op_written)

        self.counters["commits"] += 1
        # On a SYNC_MASTER the commit waits for a slave; FLUSH_SLAVE_TIMEOUT and
        # SLAVE_NOT_AVAILABLE still stored it, so it is resolved and answered SUCCESS (RocketMQ).
        self.ha.put_message(final, final_written)
        return None

    def _refuse(self, request: RemotingCommand, remark: str) -> RemotingCommand:
        self.counters["refused"] += 1
        log.warning("END_TRANSACTION refused: %s", remark)
        return request.response(ResponseCode.SYSTEM_ERROR, remark)

    def _find_half(self, header: EndTransactionRequestHeader) -> tuple[MessageExt | None, str]:
        offset = header.commit_log_offset
        record = self.store.look_message_by_offset(offset) if offset >= 0 else None
        half = None
        if record is not None:
            try:
                half = decode_record(record)
            except MessageFormatError:
                half = None
            finally:
                record.release()
        if half is None or half.commit_log_offset != offset:
            return None, (
                f"Find prepared transaction message failed: no message at commit-log offset "
                f"{offset} (a wrong offset, or the store no longer holds it)"
            )
        if half.topic != TRANS_HALF_TOPIC:
            return None, (
                f"the message at commit-log offset {offset} is in topic {half.topic}, "
                "not a prepared (half) transaction message"
            )
        group = half.properties.get(MessageConst.PGROUP)
        if group != header.producer_group:
            return None, (
                f"The producer group wrong: the half message belongs to {group!r}, "
                f"not {header.producer_group!r}"
            )
        if half.queue_offset != header.tran_state_table_offset:
            return None, (
                f"The transaction state table offset wrong: the half message at commit-log "
                f"offset {offset} has queue offset {half.queue_offset}, not "
                f"{header.tran_state_table_offset}"
            )
        return half, ""

    def _final_message(self, half: MessageExt) -> MessageExtBrokerInner | None:
        properties = dict(half.properties)
        real_topic = properties.pop(MessageConst.REAL_TOPIC, None)
        real_qid = properties.pop(MessageConst.REAL_QID, None)
        properties.pop(MessageConst.TRAN_MSG, None)
        if not real_topic or real_qid is None or not real_qid.lstrip("-").isdigit():
            return None
        sys_flag = half.sys_flag & ~(MessageSysFlag.TRANSACTION_MASK | _HOST_V6_BITS)
        return MessageExtBrokerInner.from_stored(
            half, topic=real_topic, queue_id=int(real_qid), properties=properties,
            sys_flag=sys_flag | MessageSysFlag.TRANSACTION_COMMIT,
            prepared_transaction_offset=half.commit_log_offset,
        )  # fmt: skip

    def _put_op(self, half: MessageExt, callback: Callable[[PutMessageResult], object]) -> None:
        self.topics.create_topic_in_send_back_nowait(TRANS_OP_HALF_TOPIC, 1, PERM_RW)
        config = self.config
        op = MessageExtBrokerInner(
            topic=TRANS_OP_HALF_TOPIC,
            body=str(half.queue_offset).encode(),
            queue_id=0,
            properties={MessageConst.TAGS: REMOVE_TAG, MessageConst.WAIT: "false"},
            born_timestamp=_now_ms(),
            born_host=(config.broker_ip1, config.listen_port),
        )
        self.store.put_message_nowait(op, callback)

    # -- check-back --------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Check unresolved half messages every ``transactionCheckInterval`` until cancelled."""
        task_status.started()
        while True:
            await trio.sleep(self.config.transaction_check_interval / 1000)
            if not self.config.is_slave:
                await self.check_once()

    async def check_once(self) -> CheckRound:
        """One pass over the half queue: check or discard what is due, then save the progress."""
        async with self._check_lock:
            return await self._check()

    async def _check(self) -> CheckRound:
        store = self.store
        offsets = self.offsets
        config = self.config
        self.counters["check_rounds"] += 1
        half_offset = max(
            offsets.query_offset(CID_RMQ_SYS_TRANS, TRANS_HALF_TOPIC, 0),
            store.get_min_offset_in_queue(TRANS_HALF_TOPIC, 0),
        )
        op_offset = max(
            offsets.query_offset(CID_RMQ_SYS_TRANS, TRANS_OP_HALF_TOPIC, 0),
            store.get_min_offset_in_queue(TRANS_OP_HALF_TOPIC, 0),
        )
        # Halves re-put during this pass lie past this end and wait for the next pass.
        half_end = store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0)
        ops = _OpScan(op_offset, half_offset)
        ops.read(self)
        checked = discarded = 0
        now = _now_ms()
        timeout = config.transaction_time_out
        too_old = config.file_reserved_time * 3600 * 1000
        position = half_offset
        for queue_offset, half in self._records(TRANS_HALF_TOPIC, half_offset, half_end):
            if queue_offset > position:
                position = queue_offset  # a hole in the queue (files removed): skip it
            if ops.resolve(queue_offset):
                position = queue_offset + 1
                continue
            times = _int(half.properties.get(MessageConst.TRANSACTION_CHECK_TIMES))
            age = now - half.born_timestamp
            if times >= config.transaction_check_max or age > too_old:
                log.warning(
                    "half message %s of producer group %s (topic %s, queue offset %d) discarded "
                    "after %d checks without commit or rollback",
                    half.msg_id, half.properties.get(MessageConst.PGROUP),
                    half.properties.get(MessageConst.REAL_TOPIC), queue_offset, times,
                )  # fmt: skip
                discarded += 1
                self.counters["discarded"] += 1
                position = queue_offset + 1
                continue
            if 0 <= age < timeout:
                break  # later halves are younger still
            # An END_TRANSACTION may have landed while this pass awaited the store.
            ops.read(self)
            if ops.resolve(queue_offset):
                position = queue_offset + 1
                continue
            if not await self._check_half(half, times + 1):
                break  # the re-put failed: try this half again next pass
            checked += 1
            position = queue_offset + 1
        await offsets.call(CommitOffsets(CID_RMQ_SYS_TRANS, TRANS_HALF_TOPIC, {0: position}))
        new_op_offset = ops.progress()
        await offsets.call(
            CommitOffsets(CID_RMQ_SYS_TRANS, TRANS_OP_HALF_TOPIC, {0: new_op_offset})
        )
        return CheckRound(position, new_op_offset, checked, discarded)

    async def _check_half(self, half: MessageExt, times: int) -> bool:
        properties = dict(half.properties)
        properties[MessageConst.TRANSACTION_CHECK_TIMES] = str(times)
        renewed = MessageExtBrokerInner.from_stored(
            half, topic=TRANS_HALF_TOPIC, queue_id=0, properties=properties,
            sys_flag=half.sys_flag & ~_HOST_V6_BITS,
        )  # fmt: skip
        result = await self.store.put_message(renewed)
        if not result.ok:
            log.error("half message %s not re-put for its check: %s %s",
                      half.msg_id, result.status, result.remark)  # fmt: skip
            return False
        group = properties.get(MessageConst.PGROUP, "")
        channels = self.clients.producer_table.get(group, {})
        live = [connection for connection in channels if not connection.closed]
        if not live:
            self.counters["checks_unsent"] += 1
            log.warning("no live producer of group %r to check half message %s; asking again "
                        "next time", group, half.msg_id)  # fmt: skip
            return True
        commit_log_offset = result.physical_offsets[0] if result.physical_offsets else 0
        uniq_key = properties.get(MessageConst.UNIQ_KEY)
        offset_msg_id = result.msg_ids[0] if result.physical_offsets else None
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=result.queue_offset,
            commit_log_offset=commit_log_offset,
            msg_id=uniq_key,
            transaction_id=uniq_key,
            offset_msg_id=offset_msg_id,
        )
        # The body is the half as the producer sent it: real topic and queue, with the re-put
        # copy's offsets (those are what END_TRANSACTION must name).
        real_qid = properties.get(MessageConst.REAL_QID, "0")
        config = self.config
        body = encode_record(
            topic=properties.get(MessageConst.REAL_TOPIC, TRANS_HALF_TOPIC),
            body=half.body,
            queue_id=int(real_qid) if real_qid.lstrip("-").isdigit() else 0,
            flag=half.flag,
            properties=properties_to_string(properties),
            sys_flag=half.sys_flag & ~_HOST_V6_BITS,
            born_timestamp=half.born_timestamp,
            born_host=half.born_host,
            store_host=(config.broker_ip1, config.listen_port),
            store_timestamp=result.store_timestamp,
            queue_offset=result.queue_offset,
            physical_offset=commit_log_offset,
            reconsume_times=half.reconsume_times,
            prepared_transaction_offset=half.prepared_transaction_offset,
        )
        request = RemotingCommand.request(
            RequestCode.CHECK_TRANSACTION_STATE, encode_header(header), bytes(body), oneway=True
        )
        try:
            random.choice(live).send_oneway(request)
        except ConnectionClosedError:
            self.counters["checks_unsent"] += 1
            return True
        self.counters["checks_sent"] += 1
        return True

    def _records(self, topic: str, start: int, end: int) -> Iterator[tuple[int, MessageExt]]:
        """(queue offset, decoded record) of queue 0 of ``topic`` from ``start`` to ``end``."""
        store = self.store
        offset = start
        while offset < end:
            result = store.get_message(CID_RMQ_SYS_TRANS, topic, 0, offset, _READ_BATCH)
            try:
                if not result.buffers:
                    if result.next_begin_offset <= offset:
                        return
                    offset = result.next_begin_offset
                    continue
                pairs = zip(result.queue_offsets, result.buffers, strict=True)
                decoded = [(queue_offset, decode_record(buffer)) for queue_offset, buffer in pairs]
                offset = result.next_begin_offset
            finally:
                result.release()
            for queue_offset, message in decoded:
                if queue_offset >= end:
                    return
                yield queue_offset, message

    def statistics(self) -> TransactionStatistics:
        """The service's counters."""
        return TransactionStatistics(**self.counters)


class _OpScan:
    """Op messages read so far: which halves they resolve, which op offsets are used up."""

    def __init__(self, op_offset: int, half_offset: int) -> None:
        self.start = op_offset
        self.read_to = op_offset
        self.half_offset = half_offset
        self.removed: dict[int, int] = {}  # half queue offset -> op queue offset
        self.done: set[int] = set()  # op queue offsets that no half still needs

    def read(self, service: TransactionalMessageService) -> None:
        """Take in op messages stored since the last read."""
        end = service.store.get_max_offset_in_queue(TRANS_OP_HALF_TOPIC, 0)
        if end <= self.read_to:
            return
        for op_offset, op in service._records(TRANS_OP_HALF_TOPIC, self.read_to, end):
            half_offset = _int(op.body.decode("ascii", "replace"), -1)
            if op.tags != REMOVE_TAG or half_offset < self.half_offset:
                self.done.add(op_offset)
            else:
                self.removed[half_offset] = op_offset
        self.read_to = end

    def resolve(self, half_offset: int) -> bool:
        """Whether an op message resolves the half at ``half_offset`` (it is then used up)."""
        op_offset = self.removed.pop(half_offset, None)
        if op_offset is None:
            return False
        self.done.add(op_offset)
        return True

    def progress(self) -> int:
        """The op offset up to which every op message is used up."""
        offset = self.start
        while offset in self.done:
            offset += 1
        return offset


def _int(text: str | None, default: int = 0) -> int:
    try:
        return int(text) if text else default
    except ValueError:
        return default


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
