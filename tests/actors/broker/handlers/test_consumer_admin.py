"""The operator's requests: offset resets (by time, explicit, one queue) and the consumers
told of them, offset clones, broker settings, system topics, and calls relayed to a consumer."""

from __future__ import annotations

import orjson
import trio

from boltmq import EmbeddedCluster
from protocol import Dispatcher, RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.bodies import DataVersion, MessageQueue, ResetOffsetBody, TopicList
from protocol.codes import LanguageCode
from protocol.connection import Connection
from protocol.headers import (
    CloneGroupOffsetRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    ResetOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    decode_header,
    encode_header,
)
from tests.actors.broker.helpers import heartbeat_request, send_request

TOPIC = "ResetTopic"


async def fill(cluster: EmbeddedCluster, client: RemotingClient) -> list[str]:
    """6 messages to queue 0 with distinct store times, 2 to queue 1; CG committed 6 and 2."""
    msg_ids = []
    for i in range(6):
        answer = await client.invoke(cluster.broker_address, send_request(TOPIC, b"m%d" % i))
        assert answer.code == 0 and answer.ext_fields is not None
        msg_ids.append(answer.ext_fields["msgId"])
        await trio.sleep(0.01)
    for _ in range(2):
        assert (
            await client.invoke(cluster.broker_address, send_request(TOPIC, queue_id=1))
        ).code == 0
    for queue_id, offset in ((0, 6), (1, 2)):
        header = UpdateConsumerOffsetRequestHeader(
            consumer_group="CG", topic=TOPIC, queue_id=queue_id, commit_offset=offset
        )
        answer = await client.invoke(
            cluster.broker_address,
            RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, encode_header(header)),
        )
        assert answer.code == 0
    return msg_ids


def reset_request(
    timestamp: int,
    *,
    force: bool = False,
    body: bytes | None = None,
    queue_id: int | None = None,
    offset: int | None = None,
    group: str = "CG",
    topic: str = TOPIC,
) -> RemotingCommand:
    header = ResetOffsetRequestHeader(
        topic=topic,
        group=group,
        timestamp=timestamp,
        is_force=force,
        queue_id=queue_id,
        offset=offset,
    )
    return RemotingCommand.request(
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, encode_header(header), body
    )


def offsets_of(answer: RemotingCommand) -> dict[int, int]:
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert answer.body is not None
    return {
        mq.queue_id: offset
        for mq, offset in ResetOffsetBody.from_json(answer.body).offset_table.items()
    }


async def test_reset_by_time(cluster: EmbeddedCluster, client: RemotingClient) -> None:
    broker = cluster.broker
    address = cluster.broker_address
    with trio.fail_after(10):
        await fill(cluster, client)
        third = broker.store.get_message_store_timestamp(TOPIC, 0, 3)
        # Queue 1's messages are all younger than that time: it goes back to its start.
        assert offsets_of(await client.invoke(address, reset_request(third))) == {
            0: 3,
            1: 0,
            2: 0,
            3: 0,
        }
        assert broker.offsets.query_offset("CG", TOPIC, 0) == 3
        # Without isForce a queue never moves ahead; with it, -1 means the queue's end.
        assert offsets_of(await client.invoke(address, reset_request(-1)))[0] == 3
        assert offsets_of(await client.invoke(address, reset_request(-1, force=True))) == {
            0: 6,
            1: 2,
            2: 0,
            3: 0,
        }
        assert broker.offsets.query_offset("CG", TOPIC, 0) == 6
        unknown_topic = await client.invoke(address, reset_request(0, topic="Nope"))
        no_offsets = await client.invoke(address, reset_request(0, group="Stranger"))
    assert unknown_topic.code == ResponseCode.SYSTEM_ERROR
    assert no_offsets.code == ResponseCode.SYSTEM_ERROR and "no offset" in (no_offsets.remark or "")


async def test_reset_to_explicit_offsets(cluster: EmbeddedCluster, client: RemotingClient) -> None:
    broker = cluster.broker
    address = cluster.broker_address
    name = broker.config.broker_name
    with trio.fail_after(10):
        await fill(cluster, client)
        table = {
            MessageQueue(topic=TOPIC, broker_name=name, queue_id=0): 2,
            MessageQueue(topic=TOPIC, broker_name=name, queue_id=1): 1,
            MessageQueue(topic=TOPIC, broker_name="other-broker", queue_id=0): 99,  # skipped
        }
        body = ResetOffsetBody(offset_table=table).to_json()
        assert offsets_of(await client.invoke(address, reset_request(0, body=body))) == {0: 2, 1: 1}
        assert (
            broker.offsets.query_offset("CG", TOPIC, 0),
            broker.offsets.query_offset("CG", TOPIC, 1),
        ) == (2, 1)
        # One queue, RocketMQ 5's header form.
        assert offsets_of(await client.invoke(address, reset_request(0, queue_id=0, offset=5))) == {
            0: 5
        }
        # Past the queue's end: refused, nothing changed.
        too_far = ResetOffsetBody(offset_table={
            MessageQueue(topic=TOPIC, broker_name=name, queue_id=1): 0,
            MessageQueue(topic=TOPIC, broker_name=name, queue_id=0): 7,
        }).to_json()  # fmt: skip
        refused = await client.invoke(address, reset_request(0, body=too_far))
        bad_queue = await client.invoke(address, reset_request(0, queue_id=9, offset=0))
    assert refused.code == ResponseCode.SYSTEM_ERROR and "[0, 6]" in (refused.remark or "")
    assert bad_queue.code == ResponseCode.SYSTEM_ERROR
    assert (
        broker.offsets.query_offset("CG", TOPIC, 0),
        broker.offsets.query_offset("CG", TOPIC, 1),
    ) == (5, 1)


async def test_live_consumers_are_told(cluster: EmbeddedCluster, client: RemotingClient) -> None:
    told: list[tuple[LanguageCode, RemotingCommand]] = []
    both = trio.Event()

    def consumer(language: LanguageCode) -> Dispatcher:
        def on_reset(connection: Connection, request: RemotingCommand) -> None:
            told.append((language, request))
            if len(told) == 2:
                both.set()

        dispatcher = Dispatcher()
        dispatcher.register(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, on_reset)
        return dispatcher

    address = cluster.broker_address
    name = cluster.broker.config.broker_name
    async with (
        RemotingClient(consumer(LanguageCode.JAVA)) as java,
        RemotingClient(consumer(LanguageCode.CPP)) as cpp,
    ):
        with trio.fail_after(10):
            await fill(cluster, client)
            assert (await java.invoke(address, heartbeat_request("java-1", "CG", TOPIC))).code == 0
            heartbeat = heartbeat_request("cpp-1", "CG", TOPIC)
            heartbeat.language = LanguageCode.CPP
            assert (await cpp.invoke(address, heartbeat)).code == 0
            answer = await client.invoke(address, reset_request(0, force=True))
            assert offsets_of(answer) == {0: 0, 1: 0, 2: 0, 3: 0}
            await both.wait()
    by_language = dict(told)
    java_request = by_language[LanguageCode.JAVA]
    assert java_request.is_oneway
    header = decode_header(ResetOffsetRequestHeader, java_request.ext_fields)
    assert (header.topic, header.group, header.timestamp, header.is_force) == (TOPIC, "CG", 0, True)
    assert java_request.body is not None
    java_table = ResetOffsetBody.from_json(java_request.body).offset_table
    assert java_table[MessageQueue(topic=TOPIC, broker_name=name, queue_id=0)] == 0
    cpp_body = by_language[LanguageCode.CPP].body
    assert cpp_body is not None
    entries = orjson.loads(cpp_body)["offsetTable"]
    assert {"brokerName": name, "offset": 0, "queueId": 1, "topic": TOPIC} in entries


async def test_clone_group_offset(cluster: EmbeddedCluster, client: RemotingClient) -> None:
    with trio.fail_after(10):
        await fill(cluster, client)
        header = CloneGroupOffsetRequestHeader(src_group="CG", dest_group="Copy", offline=True)
        request = RemotingCommand.request(RequestCode.CLONE_GROUP_OFFSET, encode_header(header))
        assert (await client.invoke(cluster.broker_address, request)).code == 0
    assert cluster.broker.offsets.queue_offsets("Copy", TOPIC) == {0: 6, 1: 2}


async def test_broker_config_get_and_update(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    broker = cluster.broker
    address = cluster.broker_address

    def update(text: str) -> RemotingCommand:
        return RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, None, text.encode())

    with trio.fail_after(10):
        got = await client.invoke(address, RemotingCommand.request(RequestCode.GET_BROKER_CONFIG))
        assert got.code == ResponseCode.SUCCESS and got.body is not None and got.ext_fields
        lines = dict(line.split("=", 1) for line in got.body.decode().splitlines())
        assert lines == broker.config.to_properties()
        assert DataVersion.from_json(got.ext_fields["version"]) == broker.topics.data_version

        changed = await client.invoke(
            address, update("# operator\nlongPollingEnable=false\nbrokerPermission=4\n")
        )
        assert changed.code == ResponseCode.SUCCESS, changed.remark
        assert (broker.config.long_polling_enable, broker.config.broker_permission) == (False, 4)
        refused_send = await client.invoke(address, send_request(TOPIC))
        assert refused_send.code == ResponseCode.NO_PERMISSION

        fixed = await client.invoke(address, update("listenPort=1\nlongPollingEnable=true"))
        unknown = await client.invoke(address, update("noSuchKey=1\nlongPollingEnable=true"))
        bad = await client.invoke(
            address, update("shortPollingTimeMills=-5\nlongPollingEnable=true")
        )
    assert fixed.code == ResponseCode.NO_PERMISSION and "listenPort" in (fixed.remark or "")
    assert unknown.code == ResponseCode.SYSTEM_ERROR and "noSuchKey" in (unknown.remark or "")
    assert bad.code == ResponseCode.SYSTEM_ERROR and "nothing was changed" in (bad.remark or "")
    assert broker.config.long_polling_enable is False
    assert broker.config.short_polling_time_mills == 1000


async def test_system_topic_list(cluster: EmbeddedCluster, client: RemotingClient) -> None:
    with trio.fail_after(10):
        answer = await client.invoke(
            cluster.broker_address,
            RemotingCommand.request(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER),
        )
    assert answer.body is not None
    topics = TopicList.from_json(answer.body).topic_list
    assert {"SCHEDULE_TOPIC_XXXX", "TBW102", "RMQ_SYS_TRANS_HALF_TOPIC"} <= set(topics)
    assert TOPIC not in topics


async def test_calls_relayed_to_a_consumer(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    received: list[RemotingCommand] = []

    def on_running_info(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        received.append(request)
        return request.response(body=b'{"properties":{"consumeType":"CONSUME_PASSIVELY"}}')

    def on_consume_directly(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        received.append(request)
        return request.response(
            ResponseCode.SUCCESS, "consumed", body=b'{"consumeResult":"CR_SUCCESS"}'
        )

    dispatcher = Dispatcher()
    dispatcher.register(RequestCode.GET_CONSUMER_RUNNING_INFO, on_running_info)
    dispatcher.register(RequestCode.CONSUME_MESSAGE_DIRECTLY, on_consume_directly)
    address = cluster.broker_address
    async with RemotingClient(dispatcher) as consumer:
        with trio.fail_after(10):
            msg_ids = await fill(cluster, client)
            assert (
                await consumer.invoke(address, heartbeat_request("cid-1", "CG", TOPIC))
            ).code == 0
            info_header = GetConsumerRunningInfoRequestHeader(
                consumer_group="CG", client_id="cid-1"
            )
            info = await client.invoke(
                address,
                RemotingCommand.request(
                    RequestCode.GET_CONSUMER_RUNNING_INFO, encode_header(info_header)
                ),
            )
            direct_header = ConsumeMessageDirectlyResultRequestHeader(
                consumer_group="CG", client_id="cid-1", msg_id=msg_ids[2]
            )
            direct = await client.invoke(
                address,
                RemotingCommand.request(
                    RequestCode.CONSUME_MESSAGE_DIRECTLY, encode_header(direct_header)
                ),
            )
            absent_header = GetConsumerRunningInfoRequestHeader(
                consumer_group="CG", client_id="cid-2"
            )
            absent = await client.invoke(
                address,
                RemotingCommand.request(
                    RequestCode.GET_CONSUMER_RUNNING_INFO, encode_header(absent_header)
                ),
            )
    assert info.code == ResponseCode.SUCCESS
    assert info.body == b'{"properties":{"consumeType":"CONSUME_PASSIVELY"}}'
    assert (direct.code, direct.remark, direct.body) == (
        0,
        "consumed",
        b'{"consumeResult":"CR_SUCCESS"}',
    )
    running, consume = received
    assert running.code == RequestCode.GET_CONSUMER_RUNNING_INFO
    assert running.ext_fields is not None and running.ext_fields["clientId"] == "cid-1"
    assert consume.ext_fields is not None
    assert consume.ext_fields["brokerName"] == cluster.broker.config.broker_name
    record = cluster.broker.store.look_message_by_offset(int(msg_ids[2][-16:], 16))
    assert record is not None and consume.body == bytes(record)
    record.release()
    assert absent.code == ResponseCode.CONSUMER_NOT_ONLINE
