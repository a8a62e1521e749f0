"""Pop consumption's plain state: checkpoints, receipt handles, the records a pop hands out,
and the per-group figures operators read.

No I/O and no clock: the pop service (`actors.broker.services.pop`) owns the instances. A
checkpoint's JSON is the body of its ``ck`` message in the revive topic; an ack's body is
``{"c","t","q","so","pt","o"}`` (group, topic read, queue, start offset, pop time, offsets);
a FIFO queue's delivery counts are an ``oc`` message, ``{"c","t","q","d"}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

import attrs

from protocol.codes import ResponseCode
from protocol.command import RemotingError
from protocol.message import MessageExt, encode_record, properties_to_string
from protocol.names import RETRY_GROUP_TOPIC_PREFIX, pop_retry_topic, pop_retry_topic_v2

#: The property that carries a popped message's receipt handle (RocketMQ's POP_CK).
POP_CK = "POP_CK"
#: When a message was first popped (RocketMQ's 1ST_POP_TIME), kept across retries.
FIRST_POP_TIME = "1ST_POP_TIME"
#: The revive queue every checkpoint of this broker goes to (one queue keeps the log ordered).
REVIVE_QUEUE_ID = 0
#: The revive queue id a FIFO pop's handles name (RocketMQ's POP_ORDER_REVIVE_QUEUE).
ORDER_REVIVE_QUEUE_ID = 999
#: Percent of pops that read the retry topic before the topic (RocketMQ's default).
POP_FROM_RETRY_PERCENT = 20
#: How often the in-flight checkpoints are looked at for ended invisible times, in seconds.
REVIVE_INTERVAL = 0.1
#: Checkpoints one revive pass brings back at most (the next tick does the rest).
REVIVE_BATCH = 16
#: A pop hands out at most this many messages (RocketMQ refuses more).
MAX_POP_NUMS = 32
#: Invisible times accepted, in ms (RocketMQ 5's proxy keeps them under 12 hours).
MIN_INVISIBLE_TIME = 1
MAX_INVISIBLE_TIME = 12 * 3600 * 1000
#: ConsumeInitMode: a group's first pop of a queue starts at its first or its next offset.
INIT_MODE_MIN = 0
INIT_MODE_MAX = 1

CK_TAG = "ck"
ACK_TAG = "ack"
#: A FIFO queue's delivery counts after an invisible time ended: ``{"c","t","q","d"}``,
#: ``d`` the pairs (queue offset, deliveries so far) of its messages not yet acked.
ORDER_COUNT_TAG = "oc"
# A receipt handle's retry field: the topic itself, the retry topic, its second form.
_NORMAL, _RETRY, _RETRY_V2 = "0", "1", "2"

CheckpointKey = tuple[str, str, int, int, int]  # group, topic read, queue id, start, pop time


class PopRefused(RemotingError):
    """A pop, ack or change the actor refuses, with RocketMQ's response code."""


@attrs.define
class Checkpoint:
    """Messages of one queue handed out by one pop (or one change of invisible time)."""

    group: str
    #: The topic as the client knows it; `topic` is the one read (it or its retry topic).
    origin_topic: str
    topic: str
    queue_id: int
    start_offset: int
    pop_time: int
    invisible_time: int
    #: Queue offset -> commit-log offset of each message handed out.
    offsets: dict[int, int]
    #: The pop offset after this pop (-1: a change of invisible time, which moves none).
    next_offset: int = -1
    acked: set[int] = attrs.field(factory=set)
    #: Where the checkpoint is in the revive topic.
    revive_offset: int = -1
    #: A FIFO pop's: its queue is handed out no further until this is settled or due.
    order: bool = False
    #: The FIFO pop's attemptId: a pop with the same one gets the same messages again.
    attempt_id: str = ""

    @property
    def queue(self) -> tuple[str, str, int]:
        """(group, topic read, queue id)."""
        return (self.group, self.topic, self.queue_id)

    @property
    def order_point(self) -> int:
        """A FIFO queue's offset after this pop's acks: its first message not acked."""
        waiting = [offset for offset in self.offsets if offset not in self.acked]
        return min(waiting) if waiting else self.next_offset

    @property
    def key(self) -> CheckpointKey:
        """What a receipt handle names."""
        return (self.group, self.topic, self.queue_id, self.start_offset, self.pop_time)

    @property
    def revive_time(self) -> int:
        """When the messages not acked come back."""
        return self.pop_time + self.invisible_time

    @property
    def settled(self) -> bool:
        """Every message acked (or revived)."""
        return len(self.acked) >= len(self.offsets)

    def to_json(self) -> bytes:
        """The body of its revive-log message."""
        return json.dumps(
            {"c": self.group, "ot": self.origin_topic, "t": self.topic, "q": self.queue_id,
             "so": self.start_offset, "pt": self.pop_time, "it": self.invisible_time,
             "o": [[q, p] for q, p in self.offsets.items()], "n": self.next_offset,
             "or": self.order, "a": self.attempt_id},
            separators=(",", ":"),
        ).encode()  # fmt: skip

    @classmethod
    def from_json(cls, data: bytes) -> Checkpoint:
        """Read back a revive-log checkpoint."""
        d = json.loads(data)
        return cls(
            d["c"], d["ot"], d["t"], int(d["q"]), int(d["so"]), int(d["pt"]), int(d["it"]),
            {int(q): int(p) for q, p in d["o"]}, int(d["n"]),
            order=bool(d.get("or", False)), attempt_id=str(d.get("a") or ""),
        )  # fmt: skip


@attrs.define
class PopGroupCounters:
    """Counts of one (group, topic) since the broker started (memory only, as RocketMQ's
    BrokerStatsManager keeps its GROUP_CK_NUMS, GROUP_ACK_NUMS and DLQ_PUT_NUMS)."""

    ck_nums: int = 0  # messages handed out by pops
    ack_nums: int = 0  # messages acked
    revive_nums: int = 0  # messages that came back after their invisible time ended
    dlq_put_nums: int = 0  # messages moved to %DLQ%<group>


@attrs.frozen(kw_only=True)
class PopGroupStats:
    """What an operator sees of one pop group on one topic: `PopGroupCounters` and the
    messages in flight now (handed out, not yet acked nor come back), per queue read."""

    group: str
    topic: str
    ck_nums: int
    ack_nums: int
    revive_nums: int
    dlq_put_nums: int
    #: (topic read: the topic or its pop retry topic, queue id) -> messages in flight.
    in_flight: dict[tuple[str, int], int]

    @property
    def in_flight_total(self) -> int:
        """Messages in flight over every queue."""
        return sum(self.in_flight.values())


def collect_group_stats(
    checkpoints: Iterable[Checkpoint],
    counters: Mapping[tuple[str, str], PopGroupCounters],
    group: str | None = None,
) -> list[PopGroupStats]:
    """`PopGroupStats` of each (group, topic) with counters or checkpoints in flight (only
    ``group``'s when given), by (group, topic)."""
    in_flight: dict[tuple[str, str], dict[tuple[str, int], int]] = {}
    for ck in checkpoints:
        if group is not None and ck.group != group:
            continue
        waiting = len(ck.offsets) - len(ck.acked)
        if waiting > 0:
            queues = in_flight.setdefault((ck.group, ck.origin_topic), {})
            queue = (ck.topic, ck.queue_id)
            queues[queue] = queues.get(queue, 0) + waiting
    keys = {k for k in counters if group is None or k[0] == group}
    stats = []
    for key in sorted(keys | set(in_flight)):
        counted = counters.get(key) or PopGroupCounters()
        stats.append(PopGroupStats(
            group=key[0], topic=key[1], ck_nums=counted.ck_nums, ack_nums=counted.ack_nums,
            revive_nums=counted.revive_nums, dlq_put_nums=counted.dlq_put_nums,
            in_flight=in_flight.get(key, {}),
        ))  # fmt: skip
    return stats


@attrs.frozen
class ReceiptHandle:
    """RocketMQ's extra info: ``ckQueueOffset popTime invisibleTime reviveQid retry
    brokerName queueId [offset]``, space-separated."""

    start_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    retry: str
    broker_name: str
    queue_id: int
    offset: int = -1

    @classmethod
    def parse(cls, text: str) -> ReceiptHandle:
        """The handle in ``text``; PopRefused(INVALID_PARAMETER) naming what is wrong."""
        fields = text.split(" ")
        if len(fields) not in (7, 8) or fields[4] not in (_NORMAL, _RETRY, _RETRY_V2):
            raise PopRefused(
                ResponseCode.INVALID_PARAMETER,
                f"malformed receipt handle (extraInfo) {text!r}: expected 'ckQueueOffset "
                "popTime invisibleTime reviveQid retry(0|1|2) brokerName queueId [offset]'",
            )
        try:
            numbers = [int(fields[i]) for i in (0, 1, 2, 3, 6)]
            offset = int(fields[7]) if len(fields) == 8 else -1
        except ValueError:
            raise PopRefused(
                ResponseCode.INVALID_PARAMETER,
                f"malformed receipt handle (extraInfo) {text!r}: a number field is not a number",
            ) from None
        start, pop_time, invisible, revive_qid, queue_id = numbers
        return cls(start, pop_time, invisible, revive_qid, fields[4], fields[5], queue_id, offset)

    def real_topic(self, group: str, topic: str) -> str:
        """The topic the message was read from: ``topic`` or one of its retry topics. A
        RocketMQ 5 front names the retry topic itself in ACK_MESSAGE and
        CHANGE_MESSAGE_INVISIBLETIME; the topic's name is taken too."""
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return topic
        if self.retry == _RETRY:
            return pop_retry_topic(group, topic)
        if self.retry == _RETRY_V2:
            return pop_retry_topic_v2(group, topic)
        return topic


def extra_info(ck: Checkpoint, broker_name: str, offset: int) -> str:
    """The receipt handle of the message at ``offset`` of ``ck`` (RocketMQ's format; a FIFO
    pop's names revive queue 999, as RocketMQ's)."""
    revive_qid = ORDER_REVIVE_QUEUE_ID if ck.order else REVIVE_QUEUE_ID
    return (
        f"{ck.start_offset} {ck.pop_time} {ck.invisible_time} {revive_qid} "
        f"{retry_flag(ck.topic)} {broker_name} {ck.queue_id} {offset}"
    )


def retry_flag(topic: str) -> str:
    """A receipt handle's retry field for messages read from ``topic``."""
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return _RETRY_V2 if "+" in topic else _RETRY
    return _NORMAL


def check_invisible_time(invisible_time: int) -> None:
    """PopRefused(INVALID_PARAMETER) unless the invisible time is in range."""
    if not MIN_INVISIBLE_TIME <= invisible_time <= MAX_INVISIBLE_TIME:
        raise PopRefused(
            ResponseCode.INVALID_PARAMETER,
            f"invisibleTime {invisible_time} ms is out of range: give "
            f"{MIN_INVISIBLE_TIME}..{MAX_INVISIBLE_TIME} ms",
        )


def with_handle(
    message: MessageExt, topic: str, handle: str, pop_time: int, reconsume_times: int | None = None
) -> bytes:
    """The record as a pop answers it: POP_CK set, a retry shown under the topic popped (a
    FIFO message with its deliveries so far as its reconsume times)."""
    properties = dict(message.properties)
    properties[POP_CK] = handle
    properties.setdefault(FIRST_POP_TIME, str(pop_time))
    return bytes(
        encode_record(
            topic=topic, body=message.body, queue_id=message.queue_id, flag=message.flag,
            properties=properties_to_string(properties), sys_flag=message.sys_flag,
            born_timestamp=message.born_timestamp, born_host=message.born_host,
            store_host=message.store_host, store_timestamp=message.store_timestamp,
            queue_offset=message.queue_offset, physical_offset=message.commit_log_offset,
            reconsume_times=message.reconsume_times if reconsume_times is None else reconsume_times,
            prepared_transaction_offset=message.prepared_transaction_offset,
            body_crc_value=message.body_crc,
        )
    )  # fmt: skip
