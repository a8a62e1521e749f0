"""Typed request and response headers: frozen attrs classes <-> ``RemotingCommand.ext_fields``.

- `decode_header(cls, ext_fields)` reads a header leniently (any JSON scalar, coerced) and
  raises ``RemotingError(SYSTEM_ERROR)`` naming the class and field when a required field is
  missing or a value does not parse; unknown keys (the C++ client's ``Signature``,
  ``AccessKey``, ``OnsChannel``) are ignored.
- `encode_header(obj)` writes one: every value a string, booleans ``"true"``/``"false"``,
  optional fields left at None omitted.
- `decode_send_header` / `encode_send_header_v2` handle SEND_MESSAGE_V2's one-letter keys.
- `REQUEST_HEADERS` maps a request code to its header class; `decode_request_header` uses it.

Classes are named after RocketMQ's Java ones; fields are snake_case, and the wire key is the
Java camelCase name (``queue_id`` <-> ``queueId``; oddities such as ``clientID`` are spelled
out in the field's metadata).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from protocol.codes import RequestCode
from protocol.headers._admin import (
    CloneGroupOffsetRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetBrokerConfigResponseHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumerStatusRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicConfigRequestHeader,
    GetTopicStatsInfoRequestHeader,
    QueryConsumeTimeSpanRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ResetOffsetRequestHeader,
    ViewBrokerStatsDataRequestHeader,
)
from protocol.headers._client import (
    CheckTransactionStateRequestHeader,
    ConsumerSendMsgBackRequestHeader,
    EndTransactionRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    NotifyConsumerIdsChangedRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from protocol.headers._codec import decode_header, encode_header, wire_keys
from protocol.headers._pop import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    NotificationRequestHeader,
    NotificationResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)
from protocol.headers._registry import (
    AddWritePermOfBrokerRequestHeader,
    AddWritePermOfBrokerResponseHeader,
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from protocol.headers._send_pull import (
    DEFAULT_REGION,
    MSG_REGION,
    SEND_V2_KEYS,
    TRACE_ON,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    PullSysFlag,
    SendFields,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    decode_send_fields,
    decode_send_header,
    decode_send_response,
    encode_send_header_v2,
    encode_send_response,
    send_v2_fields,
)

RC = RequestCode

#: Request code -> the class of its request header (codes without a header are absent).
REQUEST_HEADERS: dict[int, type] = {
    RC.SEND_MESSAGE: SendMessageRequestHeader,
    RC.SEND_MESSAGE_V2: SendMessageRequestHeader,
    RC.SEND_BATCH_MESSAGE: SendMessageRequestHeader,
    RC.PULL_MESSAGE: PullMessageRequestHeader,
    RC.QUERY_MESSAGE: QueryMessageRequestHeader,
    RC.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetRequestHeader,
    RC.UPDATE_CONSUMER_OFFSET: UpdateConsumerOffsetRequestHeader,
    RC.UPDATE_AND_CREATE_TOPIC: CreateTopicRequestHeader,
    RC.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetRequestHeader,
    RC.GET_MAX_OFFSET: GetMaxOffsetRequestHeader,
    RC.GET_MIN_OFFSET: GetMinOffsetRequestHeader,
    RC.GET_EARLIEST_MSG_STORETIME: GetEarliestMsgStoretimeRequestHeader,
    RC.VIEW_MESSAGE_BY_ID: ViewMessageRequestHeader,
    RC.UNREGISTER_CLIENT: UnregisterClientRequestHeader,
    RC.CONSUMER_SEND_MSG_BACK: ConsumerSendMsgBackRequestHeader,
    RC.END_TRANSACTION: EndTransactionRequestHeader,
    RC.GET_CONSUMER_LIST_BY_GROUP: GetConsumerListByGroupRequestHeader,
    RC.CHECK_TRANSACTION_STATE: CheckTransactionStateRequestHeader,
    RC.NOTIFY_CONSUMER_IDS_CHANGED: NotifyConsumerIdsChangedRequestHeader,
    RC.PUT_KV_CONFIG: PutKVConfigRequestHeader,
    RC.GET_KV_CONFIG: GetKVConfigRequestHeader,
    RC.DELETE_KV_CONFIG: DeleteKVConfigRequestHeader,
    RC.REGISTER_BROKER: RegisterBrokerRequestHeader,
    RC.UNREGISTER_BROKER: UnRegisterBrokerRequestHeader,
    RC.GET_ROUTEINFO_BY_TOPIC: GetRouteInfoRequestHeader,
    RC.GET_TOPIC_STATS_INFO: GetTopicStatsInfoRequestHeader,
    RC.GET_TOPIC_CONFIG: GetTopicConfigRequestHeader,
    RC.GET_CONSUMER_CONNECTION_LIST: GetConsumerConnectionListRequestHeader,
    RC.GET_PRODUCER_CONNECTION_LIST: GetProducerConnectionListRequestHeader,
    RC.WIPE_WRITE_PERM_OF_BROKER: WipeWritePermOfBrokerRequestHeader,
    RC.DELETE_SUBSCRIPTIONGROUP: DeleteSubscriptionGroupRequestHeader,
    RC.GET_CONSUME_STATS: GetConsumeStatsRequestHeader,
    RC.DELETE_TOPIC_IN_BROKER: DeleteTopicRequestHeader,
    RC.DELETE_TOPIC_IN_NAMESRV: DeleteTopicFromNamesrvRequestHeader,
    RC.GET_KVLIST_BY_NAMESPACE: GetKVListByNamespaceRequestHeader,
    RC.RESET_CONSUMER_CLIENT_OFFSET: ResetOffsetRequestHeader,
    RC.GET_CONSUMER_STATUS_FROM_CLIENT: GetConsumerStatusRequestHeader,
    RC.INVOKE_BROKER_TO_RESET_OFFSET: ResetOffsetRequestHeader,
    RC.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: GetConsumerStatusRequestHeader,
    RC.GET_TOPICS_BY_CLUSTER: GetTopicsByClusterRequestHeader,
    RC.QUERY_TOPIC_CONSUME_BY_WHO: QueryTopicConsumeByWhoRequestHeader,
    RC.QUERY_CONSUME_TIME_SPAN: QueryConsumeTimeSpanRequestHeader,
    RC.GET_CONSUMER_RUNNING_INFO: GetConsumerRunningInfoRequestHeader,
    RC.CONSUME_MESSAGE_DIRECTLY: ConsumeMessageDirectlyResultRequestHeader,
    RC.CLONE_GROUP_OFFSET: CloneGroupOffsetRequestHeader,
    RC.VIEW_BROKER_STATS_DATA: ViewBrokerStatsDataRequestHeader,
    RC.QUERY_DATA_VERSION: QueryDataVersionRequestHeader,
    RC.ADD_WRITE_PERM_OF_BROKER: AddWritePermOfBrokerRequestHeader,
    RC.POP_MESSAGE: PopMessageRequestHeader,
    RC.ACK_MESSAGE: AckMessageRequestHeader,
    RC.CHANGE_MESSAGE_INVISIBLETIME: ChangeInvisibleTimeRequestHeader,
    RC.NOTIFICATION: NotificationRequestHeader,
}

#: Request code -> the class of its response header, for the codes whose answer has one.
RESPONSE_HEADERS: dict[int, type] = {
    RC.SEND_MESSAGE: SendMessageResponseHeader,
    RC.SEND_MESSAGE_V2: SendMessageResponseHeader,
    RC.SEND_BATCH_MESSAGE: SendMessageResponseHeader,
    RC.PULL_MESSAGE: PullMessageResponseHeader,
    RC.QUERY_MESSAGE: QueryMessageResponseHeader,
    RC.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetResponseHeader,
    RC.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetResponseHeader,
    RC.GET_MAX_OFFSET: GetMaxOffsetResponseHeader,
    RC.GET_MIN_OFFSET: GetMinOffsetResponseHeader,
    RC.GET_EARLIEST_MSG_STORETIME: GetEarliestMsgStoretimeResponseHeader,
    RC.GET_KV_CONFIG: GetKVConfigResponseHeader,
    RC.REGISTER_BROKER: RegisterBrokerResponseHeader,
    RC.QUERY_DATA_VERSION: QueryDataVersionResponseHeader,
    RC.WIPE_WRITE_PERM_OF_BROKER: WipeWritePermOfBrokerResponseHeader,
    RC.ADD_WRITE_PERM_OF_BROKER: AddWritePermOfBrokerResponseHeader,
    RC.GET_BROKER_CONFIG: GetBrokerConfigResponseHeader,
    RC.POP_MESSAGE: PopMessageResponseHeader,
    RC.CHANGE_MESSAGE_INVISIBLETIME: ChangeInvisibleTimeResponseHeader,
    RC.NOTIFICATION: NotificationResponseHeader,
}

_SEND_CODES = frozenset({RC.SEND_MESSAGE, RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE})


def decode_request_header(code: int, ext_fields: Mapping[str, Any] | None) -> Any:
    """The typed request header of a request with ``code``, or None if the code has none.

    Send codes go through `decode_send_header`, which tells V1 from V2 keys by the presence
    of ``b``, so a long-named header under code 310 is read too.
    """
    if code in _SEND_CODES:
        return decode_send_header(ext_fields)
    cls = REQUEST_HEADERS.get(code)
    return None if cls is None else decode_header(cls, ext_fields)


__all__ = [
    "AckMessageRequestHeader",
    "ChangeInvisibleTimeRequestHeader",
    "ChangeInvisibleTimeResponseHeader",
    "NotificationRequestHeader",
    "NotificationResponseHeader",
    "PopMessageRequestHeader",
    "PopMessageResponseHeader",
    "DEFAULT_REGION",
    "MSG_REGION",
    "REQUEST_HEADERS",
    "RESPONSE_HEADERS",
    "SEND_V2_KEYS",
    "TRACE_ON",
    "AddWritePermOfBrokerRequestHeader",
    "AddWritePermOfBrokerResponseHeader",
    "CheckTransactionStateRequestHeader",
    "CloneGroupOffsetRequestHeader",
    "ConsumeMessageDirectlyResultRequestHeader",
    "ConsumerSendMsgBackRequestHeader",
    "CreateTopicRequestHeader",
    "DeleteKVConfigRequestHeader",
    "DeleteSubscriptionGroupRequestHeader",
    "DeleteTopicFromNamesrvRequestHeader",
    "DeleteTopicRequestHeader",
    "EndTransactionRequestHeader",
    "GetBrokerConfigResponseHeader",
    "GetConsumeStatsRequestHeader",
    "GetConsumerConnectionListRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "GetConsumerRunningInfoRequestHeader",
    "GetConsumerStatusRequestHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetEarliestMsgStoretimeResponseHeader",
    "GetKVConfigRequestHeader",
    "GetKVConfigResponseHeader",
    "GetKVListByNamespaceRequestHeader",
    "GetMaxOffsetRequestHeader",
    "GetMaxOffsetResponseHeader",
    "GetMinOffsetRequestHeader",
    "GetMinOffsetResponseHeader",
    "GetProducerConnectionListRequestHeader",
    "GetRouteInfoRequestHeader",
    "GetTopicConfigRequestHeader",
    "GetTopicStatsInfoRequestHeader",
    "GetTopicsByClusterRequestHeader",
    "NotifyConsumerIdsChangedRequestHeader",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "PullSysFlag",
    "PutKVConfigRequestHeader",
    "QueryConsumeTimeSpanRequestHeader",
    "QueryConsumerOffsetRequestHeader",
    "QueryConsumerOffsetResponseHeader",
    "QueryDataVersionRequestHeader",
    "QueryDataVersionResponseHeader",
    "QueryMessageRequestHeader",
    "QueryMessageResponseHeader",
    "QueryTopicConsumeByWhoRequestHeader",
    "RegisterBrokerRequestHeader",
    "RegisterBrokerResponseHeader",
    "ResetOffsetRequestHeader",
    "SearchOffsetRequestHeader",
    "SearchOffsetResponseHeader",
    "SendFields",
    "SendMessageRequestHeader",
    "SendMessageResponseHeader",
    "UnRegisterBrokerRequestHeader",
    "UnregisterClientRequestHeader",
    "UpdateConsumerOffsetRequestHeader",
    "ViewBrokerStatsDataRequestHeader",
    "ViewMessageRequestHeader",
    "WipeWritePermOfBrokerRequestHeader",
    "WipeWritePermOfBrokerResponseHeader",
    "decode_header",
    "decode_request_header",
    "decode_send_fields",
    "decode_send_header",
    "decode_send_response",
    "encode_header",
    "encode_send_header_v2",
    "encode_send_response",
    "send_v2_fields",
    "wire_keys",
]
