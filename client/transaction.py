"""The transactional producer (RocketMQ's TransactionMQProducer).

    def check(message: MessageExt) -> LocalTransactionState:
        return COMMIT_MESSAGE if orders.exists(message.msg_id) else ROLLBACK_MESSAGE

    async with TransactionProducer("tx-pg", namesrv_addr=..., check_listener=check) as producer:
        result = await producer.send_message_in_transaction(message, place_order, arg=order)

`send_message_in_transaction` sends a *half* message (``TRAN_MSG=true``, ``PGROUP``, sysflag
TRANSACTION_PREPARED) that no consumer sees, runs the local transaction, and ends the
transaction with a oneway END_TRANSACTION to the broker that took the half: COMMIT makes the
message visible, ROLLBACK drops it, UNKNOW leaves it to the broker's check-back. The broker
asks about unresolved halves with CHECK_TRANSACTION_STATE; ``check_listener`` answers, and the
producer sends END_TRANSACTION with ``fromTransactionCheck=true`` on the same connection.

Several transactional producers of different groups may share one `ClientInstance`: checks
are routed to the producer whose group is the half message's ``PGROUP``.
"""

from __future__ import annotations

import enum
import inspect
import logging
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs

from client.instance import ClientInstance
from client.message import Message, MQClientError, SendResult, SendStatus
from client.producer import Producer
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand, RemotingError
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
    create_uniq_id,
    decode_offset_msg_id,
    decode_record,
)

log = logging.getLogger("boltmq.client.transaction")


class LocalTransactionState(enum.Enum):
    """What the local transaction decided (RocketMQ's LocalTransactionState, spelling kept)."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"


COMMIT_MESSAGE = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK_MESSAGE = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW

_STATE_FLAG = {
    COMMIT_MESSAGE: MessageSysFlag.TRANSACTION_COMMIT,
    ROLLBACK_MESSAGE: MessageSysFlag.TRANSACTION_ROLLBACK,
    UNKNOW: MessageSysFlag.TRANSACTION_NOT_TYPE,
}

StateOrAwaitable = LocalTransactionState | Awaitable[LocalTransactionState] | None
LocalTransaction = Callable[[Message, Any], StateOrAwaitable]
"""Runs the local transaction for ``(message, arg)``; a plain or ``async`` function."""
CheckListener = Callable[[MessageExt], StateOrAwaitable]
"""Answers the broker's check of an unresolved half message; a plain or ``async`` function."""


@attrs.frozen
class TransactionSendResult(SendResult):
    """A half message's `SendResult` plus what its local transaction decided.

    ``transaction_id`` is the message's client id (UNIQ_KEY), the id checks name it by.
    """

    local_transaction_state: LocalTransactionState = UNKNOW
    transaction_id: str = ""


class TransactionProducer(Producer):
    """A producer that sends transactional messages and answers the broker's checks."""

    def __init__(
        self,
        group: str,
        *,
        check_listener: CheckListener,
        namesrv_addr: str | Sequence[str] | None = None,
        instance: ClientInstance | None = None,
        **options: Any,
    ) -> None:
        if not callable(check_listener):
            raise TypeError("check_listener must be a function of the half message")
        super().__init__(group, namesrv_addr=namesrv_addr, instance=instance, **options)
        self.check_listener = check_listener
        self._checks = {"checks": 0, "check_failures": 0, "ended": 0, "end_failures": 0}

    async def __aenter__(self) -> TransactionProducer:
        router = _CheckRouter.of(self.instance)
        router.add(self)  # first: a refused group leaves nothing open behind
        try:
            await super().__aenter__()
        except BaseException:
            router.discard(self)
            raise
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        _CheckRouter.of(self.instance).discard(self)
        await super().__aexit__(*exc_info)

    async def send_message_in_transaction(
        self,
        message: Message,
        local_transaction: LocalTransaction,
        arg: Any = None,
        *,
        timeout: float | None = None,
    ) -> TransactionSendResult:
        """Send ``message`` as a half, run ``local_transaction(message, arg)``, end it.

        The function sees a copy of the message whose properties carry ``UNIQ_KEY`` (the
        transaction id), ``TRAN_MSG`` and ``PGROUP``. It returns a `LocalTransactionState`;
        None or an exception counts as UNKNOW (the broker checks back later). A half the
        broker stored but did not flush (FLUSH_DISK_TIMEOUT and the like) is rolled back
        without running the function. The send itself raising means no half was stored.
        """
        if message.delay_level > 0:
            # Transactions and delays do not mix: the Java producer drops the delay too.
            log.info("delay level %d of a transactional message to %s ignored",
                     message.delay_level, message.topic)  # fmt: skip
        uniq_id = create_uniq_id()
        properties = {
            **message.properties,
            MessageConst.TRAN_MSG: "true",
            MessageConst.PGROUP: self.group,
            MessageConst.UNIQ_KEY: uniq_id,
        }
        half = attrs.evolve(message, properties=properties, delay_level=0)
        result, broker_transaction_id = await self._send_message(
            half, uniq_id, MessageSysFlag.TRANSACTION_PREPARED, None, timeout
        )
        error: BaseException | None = None
        if result.status is SendStatus.SEND_OK:
            try:
                state = await _resolve(local_transaction(half, arg))
            except Exception as exc:
                log.warning("local transaction of message %s (topic %s) failed; left to the "
                            "broker's check: %r", uniq_id, message.topic, exc)  # fmt: skip
                state, error = UNKNOW, exc
        else:
            state = ROLLBACK_MESSAGE
        await self._end_transaction(result, broker_transaction_id, state, error)
        return TransactionSendResult(
            **attrs.asdict(result, recurse=False),
            local_transaction_state=state,
            transaction_id=uniq_id,
        )

    def transaction_statistics(self) -> dict[str, int]:
        """Checks answered, listener failures, END_TRANSACTIONs sent and those that failed."""
        return dict(self._checks)

    # -- internals ----------------------------------------------------------------------------

    async def _end_transaction(
        self,
        result: SendResult,
        transaction_id: str | None,
        state: LocalTransactionState,
        error: BaseException | None,
    ) -> None:
        # The offset msg id names the half's commit-log offset (Java decodes it the same way).
        _, commit_log_offset = decode_offset_msg_id(result.offset_msg_id or result.msg_id)
        header = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=result.queue_offset,
            commit_log_offset=commit_log_offset,
            commit_or_rollback=_STATE_FLAG[state],
            from_transaction_check=False,
            msg_id=result.msg_id,
            transaction_id=transaction_id,
        )
        remark = None if error is None else f"executeLocalTransactionBranch exception: {error!r}"
        request = RemotingCommand.request(
            RequestCode.END_TRANSACTION, encode_header(header), oneway=True
        )
        request.remark = remark
        try:
            address = await self.instance.find_master(result.queue)
            await self.instance.remoting.invoke_oneway(address, request)
        except RemotingError as exc:
            # The half stays unresolved; the broker's check-back asks check_listener later.
            self._checks["end_failures"] += 1
            log.warning("END_TRANSACTION (%s) of message %s to broker %s not sent: %s; the "
                        "broker will check back", state.value, result.msg_id,
                        result.queue.broker_name, exc)  # fmt: skip
            return
        self._checks["ended"] += 1

    async def _answer_check(
        self, connection: Connection, request: RemotingCommand, half: MessageExt
    ) -> None:
        header = decode_header(CheckTransactionStateRequestHeader, request.ext_fields)
        self._checks["checks"] += 1
        error: BaseException | None = None
        try:
            state = await _resolve(self.check_listener(half))
        except Exception as exc:
            self._checks["check_failures"] += 1
            log.warning("check listener of group %s failed for message %s: %r; answering "
                        "UNKNOW", self.group, half.msg_id, exc)  # fmt: skip
            state, error = UNKNOW, exc
        end = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=header.tran_state_table_offset,
            commit_log_offset=header.commit_log_offset,
            commit_or_rollback=_STATE_FLAG[state],
            from_transaction_check=True,
            msg_id=half.properties.get(MessageConst.UNIQ_KEY) or half.offset_msg_id,
            transaction_id=header.transaction_id,
        )
        answer = RemotingCommand.request(RequestCode.END_TRANSACTION, encode_header(end))
        if error is not None:
            answer.remark = f"checkLocalTransactionState exception: {error!r}"
        try:
            connection.send_oneway(answer)
        except RemotingError as exc:
            self._checks["end_failures"] += 1
            log.warning("answer to the check of message %s not sent: %s", half.msg_id, exc)
            return
        self._checks["ended"] += 1


class _CheckRouter:
    """The CHECK_TRANSACTION_STATE handler of one instance: routes by the half's PGROUP."""

    _routers: weakref.WeakKeyDictionary[ClientInstance, _CheckRouter] = weakref.WeakKeyDictionary()

    def __init__(self) -> None:
        self.producers: dict[str, TransactionProducer] = {}

    @classmethod
    def of(cls, instance: ClientInstance) -> _CheckRouter:
        router = cls._routers.get(instance)
        if router is None:
            router = cls._routers[instance] = cls()
            instance.remoting.dispatcher.register(
                RequestCode.CHECK_TRANSACTION_STATE, router.handle
            )
        return router

    def add(self, producer: TransactionProducer) -> None:
        other = self.producers.get(producer.group)
        if other is not None and other is not producer:
            raise MQClientError(
                ResponseCode.SYSTEM_ERROR,
                f"transactional producer group {producer.group} is already open on client "
                f"{producer.instance.client_id}",
            )
        self.producers[producer.group] = producer

    def discard(self, producer: TransactionProducer) -> None:
        if self.producers.get(producer.group) is producer:
            del self.producers[producer.group]

    async def handle(self, connection: Connection, request: RemotingCommand) -> None:
        half = _decode_half(request)
        if half is None:
            return None
        group = half.properties.get(MessageConst.PGROUP, "")
        producer = self.producers.get(group)
        if producer is None:
            log.info("check of message %s for producer group %r, which is not open here; "
                     "ignored", half.msg_id, group)  # fmt: skip
            return None
        await producer._answer_check(connection, request, half)
        return None


def _decode_half(request: RemotingCommand) -> MessageExt | None:
    if not request.body:
        log.warning("CHECK_TRANSACTION_STATE without a message body; ignored")
        return None
    try:
        return decode_record(request.body)
    except MessageFormatError as exc:
        log.warning("CHECK_TRANSACTION_STATE with an undecodable message: %s; ignored", exc)
        return None


async def _resolve(value: StateOrAwaitable) -> LocalTransactionState:
    if inspect.isawaitable(value):
        value = await value
    if value is None:
        return UNKNOW
    if not isinstance(value, LocalTransactionState):
        raise TypeError(f"a transaction must return a LocalTransactionState, not {value!r}")
    return value
