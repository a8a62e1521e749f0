"""Request builders for lock and transaction tests, speaking to a live broker as clients do.

Rules: loopback only, ephemeral ports, a real store in ``tmp_path`` with small files, and a
deadline (``trio.fail_after``) around every wait.
"""

from __future__ import annotations

import time
from typing import Any

from protocol import RemotingCommand, RequestCode
from protocol.bodies import (
    HeartbeatData,
    LockBatchRequestBody,
    MessageQueue,
    ProducerData,
    UnlockBatchRequestBody,
)
from protocol.headers import (
    EndTransactionRequestHeader,
    encode_header,
)
from tests.actors.broker.helpers import send_request as shared_send_request


def a_minute_ago() -> int:
    """A born timestamp past transactionTimeOut but well inside fileReservedTime."""
    return time.time_ns() // 1_000_000 - 60_000


def send_request(topic: str, body: bytes = b"body", **fields: Any) -> RemotingCommand:
    """The shared builder, born a minute ago unless told otherwise (past transactionTimeOut)."""
    if fields.get("born_timestamp") is None:
        fields["born_timestamp"] = a_minute_ago()
    return shared_send_request(topic, body, **fields)


def half_request(
    topic: str,
    body: bytes = b"body",
    *,
    group: str = "PG",
    uniq_key: str = "UNIQ-1",
    queue_id: int = 0,
    born_timestamp: int | None = None,
    extra: dict[str, str] | None = None,
) -> RemotingCommand:
    """A transactional (half) send as the Java TransactionMQProducer builds it."""
    properties = {"TRAN_MSG": "true", "PGROUP": group, "UNIQ_KEY": uniq_key, "TAGS": "TagT"}
    properties.update(extra or {})
    return send_request(
        topic, body, queue_id=queue_id, properties=properties, producer_group=group,
        born_timestamp=born_timestamp,
    )  # fmt: skip


def end_transaction_request(
    *,
    group: str,
    tran_state_table_offset: int,
    commit_log_offset: int,
    commit_or_rollback: int,
    msg_id: str = "UNIQ-1",
    from_transaction_check: bool = False,
    oneway: bool = False,
) -> RemotingCommand:
    """An END_TRANSACTION request (real producers send it oneway)."""
    header = EndTransactionRequestHeader(
        producer_group=group,
        tran_state_table_offset=tran_state_table_offset,
        commit_log_offset=commit_log_offset,
        commit_or_rollback=commit_or_rollback,
        from_transaction_check=from_transaction_check,
        msg_id=msg_id,
        transaction_id=msg_id,
    )
    return RemotingCommand.request(
        RequestCode.END_TRANSACTION, encode_header(header), oneway=oneway
    )


def producer_heartbeat(client_id: str, group: str) -> RemotingCommand:
    """A HEART_BEAT announcing one producer group."""
    data = HeartbeatData(client_id=client_id, producer_data_set=[ProducerData(group_name=group)])
    return RemotingCommand.request(RequestCode.HEART_BEAT, None, data.to_json())


def lock_request(group: str, client_id: str, mqs: list[MessageQueue]) -> RemotingCommand:
    """A LOCK_BATCH_MQ request."""
    body = LockBatchRequestBody(consumer_group=group, client_id=client_id, mq_set=mqs)
    return RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, None, body.to_json())


def unlock_request(group: str, client_id: str, mqs: list[MessageQueue]) -> RemotingCommand:
    """An UNLOCK_BATCH_MQ request."""
    body = UnlockBatchRequestBody(consumer_group=group, client_id=client_id, mq_set=mqs)
    return RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, None, body.to_json())
