"""Headers of the client <-> broker requests other than send and pull (sheet 3.3-3.9)."""

from __future__ import annotations

import attrs


def _blank_to_none(value: str | None) -> str | None:
    # The C++ client sends "" for a group it does not have (sheet 3.5).
    return value or None


# -- consumer offsets (14 / 15) ----------------------------------------------------------------


@attrs.frozen(kw_only=True)
class QueryConsumerOffsetRequestHeader:
    """QUERY_CONSUMER_OFFSET request header."""

    consumer_group: str
    topic: str
    queue_id: int


@attrs.frozen(kw_only=True)
class QueryConsumerOffsetResponseHeader:
    """QUERY_CONSUMER_OFFSET response header: the next offset to consume."""

    offset: int


@attrs.frozen(kw_only=True)
class UpdateConsumerOffsetRequestHeader:
    """UPDATE_CONSUMER_OFFSET request header."""

    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int


# -- send back (36) ------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ConsumerSendMsgBackRequestHeader:
    """CONSUMER_SEND_MSG_BACK request header; ``offset`` is the commit-log offset."""

    offset: int
    group: str
    delay_level: int
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None


# -- client registration (35 / 38 / 40) ------------------------------------------------------


@attrs.frozen(kw_only=True)
class UnregisterClientRequestHeader:
    """UNREGISTER_CLIENT request header; empty group names read as absent."""

    client_id: str = attrs.field(metadata={"wire": "clientID"})
    producer_group: str | None = attrs.field(default=None, converter=_blank_to_none)
    consumer_group: str | None = attrs.field(default=None, converter=_blank_to_none)


@attrs.frozen(kw_only=True)
class GetConsumerListByGroupRequestHeader:
    """GET_CONSUMER_LIST_BY_GROUP request header."""

    consumer_group: str


@attrs.frozen(kw_only=True)
class NotifyConsumerIdsChangedRequestHeader:
    """NOTIFY_CONSUMER_IDS_CHANGED (broker -> client) request header."""

    consumer_group: str


# -- offsets, time and lookup (29 30 31 32 33 12) --------------------------------------------


@attrs.frozen(kw_only=True)
class GetMaxOffsetRequestHeader:
    """GET_MAX_OFFSET request header."""

    topic: str
    queue_id: int


@attrs.frozen(kw_only=True)
class GetMaxOffsetResponseHeader:
    """GET_MAX_OFFSET response header: the next offset to be written."""

    offset: int


@attrs.frozen(kw_only=True)
class GetMinOffsetRequestHeader:
    """GET_MIN_OFFSET request header."""

    topic: str
    queue_id: int


@attrs.frozen(kw_only=True)
class GetMinOffsetResponseHeader:
    """GET_MIN_OFFSET response header."""

    offset: int


@attrs.frozen(kw_only=True)
class SearchOffsetRequestHeader:
    """SEARCH_OFFSET_BY_TIMESTAMP request header."""

    topic: str
    queue_id: int
    timestamp: int


@attrs.frozen(kw_only=True)
class SearchOffsetResponseHeader:
    """SEARCH_OFFSET_BY_TIMESTAMP response header."""

    offset: int


@attrs.frozen(kw_only=True)
class GetEarliestMsgStoretimeRequestHeader:
    """GET_EARLIEST_MSG_STORETIME request header."""

    topic: str
    queue_id: int


@attrs.frozen(kw_only=True)
class GetEarliestMsgStoretimeResponseHeader:
    """GET_EARLIEST_MSG_STORETIME response header (ms)."""

    timestamp: int


@attrs.frozen(kw_only=True)
class ViewMessageRequestHeader:
    """VIEW_MESSAGE_BY_ID request header; ``offset`` is the commit-log offset."""

    offset: int


@attrs.frozen(kw_only=True)
class QueryMessageRequestHeader:
    """QUERY_MESSAGE request header; ``_UNIQUE_KEY_QUERY`` asks for a lookup by UNIQ_KEY."""

    topic: str
    key: str
    max_num: int
    begin_timestamp: int
    end_timestamp: int
    unique_key_query: bool = attrs.field(default=False, metadata={"wire": "_UNIQUE_KEY_QUERY"})


@attrs.frozen(kw_only=True)
class QueryMessageResponseHeader:
    """QUERY_MESSAGE response header."""

    index_last_update_timestamp: int
    index_last_update_phyoffset: int


# -- transactions (37 / 39) --------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class EndTransactionRequestHeader:
    """END_TRANSACTION request header; ``commit_or_rollback`` is 0, 8 (commit) or 12."""

    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: int
    from_transaction_check: bool = False
    msg_id: str
    transaction_id: str | None = None


@attrs.frozen(kw_only=True)
class CheckTransactionStateRequestHeader:
    """CHECK_TRANSACTION_STATE (broker -> client) request header."""

    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None
