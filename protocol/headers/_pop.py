"""RocketMQ 5's pop consumption headers: POP_MESSAGE (200050), ACK_MESSAGE (200051),
CHANGE_MESSAGE_INVISIBLETIME (200053) and NOTIFICATION (200054).

BATCH_ACK_MESSAGE (200151) and QUERY_ASSIGNMENT (400) carry no header: their requests are
JSON bodies (`protocol.bodies`). Times are epoch milliseconds, durations milliseconds.
"""

from __future__ import annotations

import attrs


@attrs.frozen(kw_only=True)
class PopMessageRequestHeader:
    """POP_MESSAGE: up to ``max_msg_nums`` messages of a group's topic (queue -1: any queue),
    invisible to other pops for ``invisible_time`` ms; ``poll_time`` > 0 waits that long for
    one when there is none."""

    consumer_group: str
    topic: str
    queue_id: int
    max_msg_nums: int
    invisible_time: int
    poll_time: int
    born_time: int
    init_mode: int
    exp_type: str | None = None
    exp: str | None = None
    order: bool = False
    attempt_id: str | None = None


@attrs.frozen(kw_only=True)
class PopMessageResponseHeader:
    """POP_MESSAGE's answer: the checkpoint's pop time and invisible time, the revive queue,
    how many messages are left, and where each queue's messages start (``startOffsetInfo``:
    ``retry queueId offset`` joined by ``;``) and which offsets were handed out
    (``msgOffsetInfo``: ``retry queueId offset,offset...`` joined by ``;``)."""

    pop_time: int
    invisible_time: int
    revive_qid: int
    rest_num: int
    start_offset_info: str | None = None
    msg_offset_info: str | None = None
    order_count_info: str | None = None


@attrs.frozen(kw_only=True)
class AckMessageRequestHeader:
    """ACK_MESSAGE: the message at ``offset`` named by its receipt handle (``extra_info``)."""

    consumer_group: str
    topic: str
    queue_id: int
    extra_info: str
    offset: int


@attrs.frozen(kw_only=True)
class ChangeInvisibleTimeRequestHeader:
    """CHANGE_MESSAGE_INVISIBLETIME: make the message invisible ``invisible_time`` ms from now."""

    consumer_group: str
    topic: str
    queue_id: int
    extra_info: str
    offset: int
    invisible_time: int


@attrs.frozen(kw_only=True)
class ChangeInvisibleTimeResponseHeader:
    """CHANGE_MESSAGE_INVISIBLETIME's answer: the new checkpoint (the new receipt handle)."""

    pop_time: int
    invisible_time: int
    revive_qid: int


@attrs.frozen(kw_only=True)
class NotificationRequestHeader:
    """NOTIFICATION: answer once the group's topic (queue -1: any queue) has a message to
    pop, or after ``poll_time`` ms."""

    consumer_group: str
    topic: str
    queue_id: int
    poll_time: int
    born_time: int
    order: bool = False
    attempt_id: str | None = None


@attrs.frozen(kw_only=True)
class NotificationResponseHeader:
    """NOTIFICATION's answer: whether there is a message (and whether the polls were full)."""

    has_msg: bool
    polling_full: bool = False
