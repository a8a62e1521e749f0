"""The send handler built from its parts alone: a stub store, a real topic table, no socket.

What it shows: `SendHandler` needs nothing but its `SendParts`, so a check or a routing rule of
the send path is testable without starting a broker. The store here only records what it is
handed and answers through the callback, as the store writer does after a group commit.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from actors.broker.config import BrokerConfig
from actors.broker.ha import HighAvailability
from actors.broker.handlers.send import SendHandler, SendParts, SendRefused
from actors.broker.services.dedup import DedupIndex
from actors.broker.services.request_stats import RequestStats
from actors.broker.services.schedule import ScheduleMessageService
from actors.broker.services.stats import BrokerStatsManager
from actors.broker.tables.delay_offsets import DelayOffsetTable
from actors.broker.tables.groups import SubscriptionGroupManager
from actors.broker.tables.topics import TopicManager, now_ms
from protocol import RemotingCommand, ResponseCode
from protocol.bodies import TopicConfig
from protocol.command import RemotingError
from protocol.frame import FrameDecoder
from protocol.headers import decode_send_response
from protocol.message import MessageConst
from protocol.names import SCHEDULE_TOPIC
from storage import MessageBatch, MessageExtBrokerInner, PutMessageResult, PutMessageStatus
from tests.actors.broker.helpers import send_request


@attrs.define
class StubStore:
    """Records each put and answers PUT_OK at the next queue offset, at once."""

    puts: list[MessageExtBrokerInner] = attrs.field(factory=list)
    next_offset: dict[tuple[str, int], int] = attrs.field(factory=dict)

    def put_message_nowait(
        self, msg: MessageExtBrokerInner, callback: Callable[[PutMessageResult], object]
    ) -> None:
        self.puts.append(msg)
        key = (msg.topic, msg.queue_id)
        offset = self.next_offset.get(key, 0)
        self.next_offset[key] = offset + 1
        physical = 1000 * len(self.puts)
        callback(
            PutMessageResult(
                PutMessageStatus.PUT_OK, wrote_offset=physical, wrote_bytes=len(msg.body) + 100,
                queue_offset=offset, msg_num=1, physical_offsets=[physical],
                msg_id_prefix="7F00000100002A9F",
            )
        )  # fmt: skip

    def put_messages_nowait(
        self, batch: MessageBatch, callback: Callable[[PutMessageResult], object]
    ) -> None:
        raise AssertionError("no batch is sent in these tests")


@attrs.define
class StubConnection:
    """A connection's surface the send handler uses: its peer, and the frames it is sent."""

    peer: str = "127.0.0.1:51000"
    closed: bool = False
    frames: list[bytes] = attrs.field(factory=list)

    def send_frame(self, frame: bytes) -> None:
        self.frames.append(frame)

    def send(self, command: RemotingCommand) -> None:
        raise AssertionError(f"unexpected answer {command}")

    def answers(self) -> list[RemotingCommand]:
        decoder = FrameDecoder()
        return [command for frame in self.frames for command in decoder.feed(frame)]


def build(config: BrokerConfig) -> tuple[SendHandler, StubStore, TopicManager]:
    store = StubStore()
    topics = TopicManager(config, None)  # the real table, no file
    topics.state.update_topic_config(
        TopicConfig(topic_name="Orders", read_queue_nums=4, write_queue_nums=4), now_ms()
    )
    ha = HighAvailability(store)  # type: ignore[arg-type]  # no replication parts
    schedule = ScheduleMessageService(
        config, store=store, topics=topics, ha=ha,  # type: ignore[arg-type]
        delay_offsets=DelayOffsetTable(None), timer_offsets=DelayOffsetTable(None),
    )  # fmt: skip
    parts = SendParts(
        config=config, topics=topics, groups=SubscriptionGroupManager(None),
        store=store,  # type: ignore[arg-type]  # only the two put calls are used
        schedule=schedule, dedup=DedupIndex(3_600_000, 1000),
        stats=BrokerStatsManager(config.broker_cluster_name), request_stats=RequestStats(),
        ha_service=None,
    )  # fmt: skip
    return SendHandler(parts), store, topics


def test_a_send_is_checked_stored_and_answered_from_its_parts() -> None:
    handler, store, _ = build(BrokerConfig(broker_cluster_name="C1"))
    connection = StubConnection()
    request = send_request("Orders", b"hello", queue_id=2, properties={"TAGS": "created"})

    assert handler(connection, request) is None  # answered by the store's callback
    [msg] = store.puts
    assert (msg.topic, msg.queue_id, bytes(msg.body)) == ("Orders", 2, b"hello")
    assert msg.properties[MessageConst.CLUSTER] == "C1"
    assert msg.born_host == ("127.0.0.1", 51000)
    [answer] = connection.answers()
    assert answer.code == ResponseCode.SUCCESS
    header = decode_send_response(answer.ext_fields)
    assert (header.queue_id, header.queue_offset) == (2, 0)
    assert header.msg_id == "7F00000100002A9F00000000000003E8"


def test_a_refused_send_reaches_no_store() -> None:
    handler, store, _ = build(BrokerConfig())
    connection = StubConnection()
    bad_queue = handler(connection, send_request("Orders", queue_id=9))
    assert isinstance(bad_queue, RemotingCommand)
    assert bad_queue.code == ResponseCode.SYSTEM_ERROR
    assert "queue id 9 is out of range" in (bad_queue.remark or "")
    bad_name = handler(connection, send_request("no spaces allowed"))
    assert isinstance(bad_name, RemotingCommand)
    assert bad_name.code != ResponseCode.SUCCESS
    assert store.puts == []


def test_a_delayed_send_goes_to_the_schedule_topic_through_the_schedule_part() -> None:
    handler, store, _ = build(BrokerConfig())
    handler(StubConnection(), send_request("Orders", queue_id=1, properties={"DELAY": "3"}))
    [msg] = store.puts
    assert (msg.topic, msg.queue_id) == (SCHEDULE_TOPIC, 2)  # level 3 -> queue 2
    assert msg.properties[MessageConst.REAL_TOPIC] == "Orders"
    assert msg.properties[MessageConst.REAL_QID] == "1"


def test_a_refusal_is_a_remoting_error_with_its_code() -> None:
    refused = SendRefused(ResponseCode.MESSAGE_ILLEGAL, "the body is empty")
    assert isinstance(refused, RemotingError)
    assert (refused.code, refused.remark) == (ResponseCode.MESSAGE_ILLEGAL, "the body is empty")
