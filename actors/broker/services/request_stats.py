"""Per-request counters behind the broker's Prometheus metrics.

`RequestStats` is the broker's `protocol.rpc_metrics.RpcLatency` (request latency histograms,
kept while metrics are on) plus the messages sent to each group's dead-letter queue
(`on_dlq`). Also here, for the typed put counters of stats.py: RocketMQ 5's message types,
the message-size buckets and `message_type_of`, which reads a send's type from its
properties text.
"""

from __future__ import annotations

from protocol.rpc_metrics import RpcLatency

__all__ = [
    "MESSAGE_SIZE_BUCKETS",
    "MESSAGE_TYPES",
    "RequestStats",
    "message_type_of",
]

#: RocketMQ 5's message types (the ``message_type`` label), indexed by `message_type_of`.
MESSAGE_TYPES = ("normal", "fifo", "delay", "transaction")
NORMAL, FIFO, DELAY, TRANSACTION = range(4)
#: Upper bounds of the message-size histogram (bytes), as RocketMQ 5's rocketmq_message_size.
MESSAGE_SIZE_BUCKETS = (1024, 4096, 512 * 1024, 1024**2, 2 * 1024**2, 4 * 1024**2)
#: A typed put counter is [messages, bytes, one count per size bucket, the overflow count].
TYPED_BUCKETS = 2


def message_type_of(properties: str | None) -> int:
    """A send's message type from its properties text (RocketMQ 5's getMessageType order)."""
    if not properties:
        return NORMAL
    # Substring tests on the wire text: decoding the properties again would cost more.
    if "TRAN_MSG\x01true" in properties:
        return TRANSACTION
    if "__SHARDINGKEY\x01" in properties:
        return FIFO
    if (
        "DELAY\x01" in properties
        or "__STARTDELIVERTIME\x01" in properties
        or ("TIMER_" in properties)
    ):
        return DELAY
    return NORMAL


class RequestStats(RpcLatency):
    """Request latencies and dead letters of one broker.

    ``timing`` is on when the broker serves metrics: without them the send path skips its
    clock reads and latency buckets (dead letters are counted either way; they are rare).
    """

    def __init__(self, *, timing: bool = True) -> None:
        super().__init__()
        self.timing = timing
        #: group -> topic -> messages sent to the group's dead-letter queue.
        self.dlq_messages: dict[str, dict[str, int]] = {}

    def on_dlq(self, group: str, topic: str, nums: int = 1) -> None:
        """``nums`` messages of ``group`` from ``topic`` went to its dead-letter queue."""
        topics = self.dlq_messages.setdefault(group, {})
        topics[topic] = topics.get(topic, 0) + nums
