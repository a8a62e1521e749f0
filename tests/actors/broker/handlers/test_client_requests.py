"""Consumer offsets (and their survival across a restart), heartbeats and client tables,
message lookups, topic admin and the registrar."""

from __future__ import annotations

from pathlib import Path

import orjson
import trio

import boltmq
from actors.broker.tables.clients import ClientChannel, ClientTable
from boltmq import EmbeddedCluster
from protocol import Dispatcher, RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.bodies import ConsumeFromWhere, ConsumeType, MessageModel, TopicConfigSerializeWrapper
from protocol.codes import LanguageCode
from protocol.connection import Later
from protocol.headers import (
    GetEarliestMsgStoretimeRequestHeader,
    GetMinOffsetRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
    encode_header,
)
from protocol.message import decode_offset_msg_id, decode_record, iter_records
from tests.actors.broker.helpers import SMALL_FILES, heartbeat_request, pull_request, send_request


def query_offset(group: str, topic: str, queue_id: int = 0) -> RemotingCommand:
    header = QueryConsumerOffsetRequestHeader(consumer_group=group, topic=topic, queue_id=queue_id)
    return RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, encode_header(header))


def update_offset(group: str, topic: str, offset: int, queue_id: int = 0) -> RemotingCommand:
    header = UpdateConsumerOffsetRequestHeader(
        consumer_group=group, topic=topic, queue_id=queue_id, commit_offset=offset
    )
    return RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, encode_header(header))


async def test_offsets_survive_a_restart(tmp_path: Path) -> None:
    async with boltmq.embedded(tmp_path, **SMALL_FILES) as cluster, RemotingClient() as client:
        broker = cluster.broker_address
        for i in range(5):
            await client.invoke(broker, send_request("Kept", f"m{i}".encode()))
        # A new group on a queue that starts at 0 is told 0.
        fresh = await client.invoke(broker, query_offset("New", "Kept"))
        assert (fresh.code, fresh.ext_fields) == (ResponseCode.SUCCESS, {"offset": "0"})
        # Committed by UPDATE_CONSUMER_OFFSET and by the pull's commit bit.
        assert (await client.invoke(broker, update_offset("G1", "Kept", 3))).code == 0
        assert (await client.invoke(broker, update_offset("G1", "Kept", -5))).code == 0  # ignored
        await client.invoke(broker, pull_request("Kept", 4, group="G2", commit_offset=2))
        assert (await client.invoke(broker, query_offset("G1", "Kept"))).ext_fields == {
            "offset": "3"
        }
    saved = (tmp_path / "store" / "config" / "consumerOffset.json").read_bytes()
    assert b'"Kept@G1":{0:3}' in saved  # fastjson's bare integer keys
    async with boltmq.embedded(tmp_path, **SMALL_FILES) as cluster, RemotingClient() as client:
        broker = cluster.broker_address
        assert (await client.invoke(broker, query_offset("G1", "Kept"))).ext_fields == {
            "offset": "3"
        }
        assert (await client.invoke(broker, query_offset("G2", "Kept"))).ext_fields == {
            "offset": "2"
        }
        # The consumer resumes where it committed.
        resumed = await client.invoke(broker, pull_request("Kept", 3, group="G1"))
        assert resumed.body is not None
        assert [r.body for r in iter_records(resumed.body)] == [b"m3", b"m4"]
        topics = TopicConfigSerializeWrapper.from_json(
            (tmp_path / "store" / "config" / "topics.json").read_bytes()
        )
        assert "Kept" in topics.topic_config_table


async def test_query_not_found_when_the_queue_no_longer_starts_at_zero(
    file_cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    answer = await client.invoke(file_cluster.broker_address, query_offset("G", "NeverWritten"))
    # An empty queue's min offset is 0: RocketMQ answers 0 there too.
    assert answer.ext_fields == {"offset": "0"}
    file_cluster.broker.store.consume_queues.find_or_create("Shifted", 0).min_logic_offset = 20 * 5
    shifted = await client.invoke(file_cluster.broker_address, query_offset("G", "Shifted"))
    assert shifted.code == ResponseCode.QUERY_NOT_FOUND


async def test_heartbeats_groups_and_notifications(cluster: EmbeddedCluster) -> None:
    broker = cluster.broker_address
    notified = trio.Event()

    def on_notify(_connection: object, request: RemotingCommand) -> None:
        assert request.ext_fields == {"consumerGroup": "CG"}
        notified.set()

    dispatcher = Dispatcher()
    dispatcher.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
    async with RemotingClient(dispatcher) as first, RemotingClient() as second:
        with trio.fail_after(10):
            assert (await first.invoke(broker, heartbeat_request("c1", "CG", "T"))).code == 0
            # The C++ form: enums as numbers, subVersion as a string, no unitMode.
            cpp = orjson.dumps(
                {"clientID": "c2", "consumerDataSet": [{"groupName": "CG", "consumeType": 1,
                 "messageModel": 1, "consumeFromWhere": 0, "subscriptionDataSet": [{"topic": "T",
                 "subString": "TagA", "tagsSet": ["TagA"], "codeSet": [2598919],
                 "subVersion": "5"}]}]}
            )  # fmt: skip
            answer = await second.invoke(
                broker, RemotingCommand.request(RequestCode.HEART_BEAT, None, cpp)
            )
            assert answer.code == 0
            await notified.wait()
        ids = await first.invoke(
            broker,
            RemotingCommand.request(
                RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"}
            ),
        )
        assert ids.body is not None
        assert sorted(orjson.loads(ids.body)["consumerIdList"]) == ["c1", "c2"]
        assert cluster.broker.topics.select("%RETRY%CG") is not None
        conns = await first.invoke(
            broker,
            RemotingCommand.request(
                RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "CG"}
            ),
        )
        assert conns.body is not None
        body = orjson.loads(conns.body)
        assert sorted(c["clientId"] for c in body["connectionSet"]) == ["c1", "c2"]
        assert body["subscriptionTable"]["T"]["subString"] == "TagA"
        # The last heartbeat's subscription (TagA) filters pulls that carry no expression.
        await first.invoke(broker, send_request("T", b"a", properties={"TAGS": "TagA"}))
        await first.invoke(broker, send_request("T", b"b", properties={"TAGS": "TagB"}))
        pulled = await first.invoke(broker, pull_request("T", subscription=None, group="CG"))
        assert pulled.body is not None
        assert [r.body for r in iter_records(pulled.body)] == [b"a"]
    # Both connections closed: the group is gone.
    with trio.fail_after(5):
        while cluster.broker.clients.get_consumer_group_info("CG") is not None:
            await trio.sleep(0.01)


def test_silent_clients_expire_after_120_seconds() -> None:
    manager = ClientTable()
    conn = object()
    channel = ClientChannel(conn, "c1", LanguageCode.JAVA, 400, 0.0)  # type: ignore[arg-type]
    manager.register_consumer(
        "G", channel, ConsumeType.CONSUME_PASSIVELY, MessageModel.CLUSTERING,
        ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, [], notify=False,
    )  # fmt: skip
    manager.register_producer("P", ClientChannel(conn, "c1", LanguageCode.JAVA, 400, 0.0))  # type: ignore[arg-type]
    assert manager.scan_not_active(119.0) == 0
    assert manager.scan_not_active(121.0) == 2
    assert manager.consumer_table == {} and manager.producer_table == {}


async def test_lookups_by_id_key_and_time(cluster: EmbeddedCluster, client: RemotingClient) -> None:
    broker = cluster.broker_address
    sent = await client.invoke(
        broker,
        send_request(
            "Looked", b"find me", properties={"KEYS": "order-7 order-8", "UNIQ_KEY": "U1"}
        ),
    )
    assert sent.ext_fields is not None
    _, offset = decode_offset_msg_id(sent.ext_fields["msgId"])
    view = await client.invoke(
        broker,
        RemotingCommand.request(
            RequestCode.VIEW_MESSAGE_BY_ID, encode_header(ViewMessageRequestHeader(offset=offset))
        ),
    )
    assert view.body is not None and decode_record(view.body).body == b"find me"
    missing = await client.invoke(
        broker,
        RemotingCommand.request(
            RequestCode.VIEW_MESSAGE_BY_ID,
            encode_header(ViewMessageRequestHeader(offset=offset + 999_999)),
        ),
    )
    assert missing.code == ResponseCode.SYSTEM_ERROR
    for key, unique in (("order-8", False), ("U1", True)):
        header = QueryMessageRequestHeader(
            topic="Looked",
            key=key,
            max_num=10,
            begin_timestamp=0,
            end_timestamp=2**62,
            unique_key_query=unique,
        )
        found = await client.invoke(
            broker, RemotingCommand.request(RequestCode.QUERY_MESSAGE, encode_header(header))
        )
        assert found.code == ResponseCode.SUCCESS, found.remark
        assert found.body is not None
        assert [r.body for r in iter_records(found.body)] == [b"find me"]
    header = QueryMessageRequestHeader(
        topic="Looked", key="nope", max_num=10, begin_timestamp=0, end_timestamp=2**62
    )
    nothing = await client.invoke(
        broker, RemotingCommand.request(RequestCode.QUERY_MESSAGE, encode_header(header))
    )
    assert nothing.code == ResponseCode.QUERY_NOT_FOUND
    stored_at = decode_record(view.body).store_timestamp
    earliest = await client.invoke(
        broker,
        RemotingCommand.request(
            RequestCode.GET_EARLIEST_MSG_STORETIME,
            encode_header(GetEarliestMsgStoretimeRequestHeader(topic="Looked", queue_id=0)),
        ),
    )
    assert earliest.ext_fields == {"timestamp": str(stored_at)}
    by_time = await client.invoke(
        broker,
        RemotingCommand.request(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
            encode_header(
                SearchOffsetRequestHeader(topic="Looked", queue_id=0, timestamp=stored_at)
            ),
        ),
    )
    assert by_time.ext_fields == {"offset": "0"}
    minimum = await client.invoke(
        broker,
        RemotingCommand.request(
            RequestCode.GET_MIN_OFFSET,
            encode_header(GetMinOffsetRequestHeader(topic="Looked", queue_id=0)),
        ),
    )
    assert minimum.ext_fields == {"offset": "0"}  # fmt: skip


async def test_auto_created_topic_is_registered_at_once(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    await client.invoke(cluster.broker_address, send_request("Fresh"))
    with trio.fail_after(5):
        while True:
            route = await client.invoke(
                cluster.registry_address,
                RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Fresh"}),
            )
            if route.code == ResponseCode.SUCCESS:
                break
            await trio.sleep(0.01)
    assert route.body is not None
    (queue,) = orjson.loads(route.body)["queueDatas"]
    assert (queue["readQueueNums"], queue["writeQueueNums"], queue["perm"]) == (4, 4, 6)


async def test_registrar_catches_up_with_a_registry_that_was_down(tmp_path: Path) -> None:
    from actors.registry import RegistryConfig, open_registry

    # A port nobody listens on yet.
    probe = trio.socket.socket()
    await probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    address = f"127.0.0.1:{port}"
    async with boltmq.open_broker(
        boltmq.BrokerConfig(
            listen_port=0, bind_address="127.0.0.1", fast_port_enable=False,
            store_path_root_dir=str(tmp_path / "store"), namesrv_addr=address,
            register_name_server_period=200,
        )
    ) as broker, RemotingClient() as client:  # fmt: skip
        assert broker.registrar is not None and broker.registrar.registrations == 0
        config = RegistryConfig(listen_port=port, bind_address="127.0.0.1", kv_config_path=None)
        async with open_registry(config):
            with trio.fail_after(10):
                while broker.registrar.registrations == 0:
                    await trio.sleep(0.02)
            info = await client.invoke(
                address, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
            )
            assert info.body is not None
            table = orjson.loads(info.body)["brokerAddrTable"]
            assert table["broker-a"]["brokerAddrs"]["0"] == broker.address


async def test_read_only_broker_permission_reaches_the_registry(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    await client.invoke(cluster.broker_address, send_request("Perm"))
    update = RemotingCommand.request(
        RequestCode.UPDATE_BROKER_CONFIG, None, b"brokerPermission=4\n"
    )
    assert (await client.invoke(cluster.broker_address, update)).code == ResponseCode.SUCCESS
    with trio.fail_after(5):
        while True:
            route = await client.invoke(
                cluster.registry_address,
                RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Perm"}),
            )
            assert route.body is not None
            if orjson.loads(route.body)["queueDatas"][0]["perm"] == 4:
                break
            await trio.sleep(0.01)
    refused = await client.invoke(cluster.broker_address, send_request("Perm"))
    assert refused.code == ResponseCode.NO_PERMISSION


async def test_a_consumer_heartbeat_is_answered_once_its_group_lists_it(
    cluster: EmbeddedCluster,
) -> None:
    # A client asks for its group's members right after its heartbeat is answered (the first
    # rebalance); RocketMQ registers before it answers, so the client must find itself.
    async with RemotingClient() as client:
        with trio.fail_after(10):
            await client.invoke(cluster.broker_address, heartbeat_request("c0", "Other", "T"))
        connection = next(iter(cluster.broker.server.connections))
        entry = cluster.broker.server.dispatcher.lookup(RequestCode.HEART_BEAT)
        assert entry is not None
        request = heartbeat_request("c1", "Listed", "T")
        answer = entry[1](connection, request)  # the handler, called as the reader calls it
        if isinstance(answer, Later):
            with trio.fail_after(10):
                answer = await answer.handler(connection, request)
        assert isinstance(answer, RemotingCommand) and answer.code == ResponseCode.SUCCESS
        # Checked as the answer leaves, before anything else runs.
        info = cluster.broker.clients.get_consumer_group_info("Listed")
        assert info is not None and info.client_ids() == ["c1"]
