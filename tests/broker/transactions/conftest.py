"""Request builders for lock and transaction tests, speaking to a live broker as clients do.

Rules: loopback only, ephemeral ports, a real store in ``tmp_path`` with small files, and a
deadline (``trio.fail_after``) around every wait.
"""

from __future__ import annotations

import time
from typing import Any

import trio

from protocol import RemotingClient, RemotingCommand, RequestCode
from protocol.bodies import (
    HeartbeatData,
    LockBatchRequestBody,
    MessageQueue,
    ProducerData,
    UnlockBatchRequestBody,
)
from protocol.headers import (
    EndTransactionRequestHeader,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    encode_header,
    encode_send_header_v2,
)
from protocol.message import properties_to_string

SMALL_FILES: dict[str, Any] = {
    "mapped_file_size_commit_log": 256 * 1024,
    "mapped_file_size_consume_queue": 20 * 1000,
}


def a_minute_ago() -> int:
    """A born timestamp past transactionTimeOut but well inside fileReservedTime."""
    return time.time_ns() // 1_000_000 - 60_000


async def call(client: RemotingClient, address: str, request: RemotingCommand) -> RemotingCommand:
    """Invoke with a deadline."""
    with trio.fail_after(10):
        return await client.invoke(address, request, 10)


def send_request(
    topic: str,
    body: bytes = b"body",
    *,
    queue_id: int = 0,
    properties: dict[str, str] | None = None,
    producer_group: str = "PG",
    born_timestamp: int | None = None,
    batch: bool = False,
) -> RemotingCommand:
    """A SEND_MESSAGE_V2 request as a Java producer builds it."""
    header = SendMessageRequestHeader(
        producer_group=producer_group,
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=a_minute_ago() if born_timestamp is None else born_timestamp,
        flag=7,
        properties=properties_to_string(properties or {}),
        batch=batch,
    )
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, encode_send_header_v2(header), body)


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


def pull_request(
    topic: str, offset: int = 0, *, group: str = "CG", queue_id: int = 0, max_msgs: int = 32
) -> RemotingCommand:
    """A PULL_MESSAGE request without suspension, subscribing everything."""
    header = PullMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=max_msgs,
        sys_flag=0x4,
        commit_offset=0,
        suspend_timeout_millis=0,
        subscription="*",
        sub_version=0,
    )
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header))


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
