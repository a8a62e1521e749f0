"""A real registry on loopback, driven by RemotingClient as brokers and clients.

Rules: loopback only, port 0, `trio.fail_after` around every I/O wait.
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
import trio

from actors.registry import KVConfigError, Registry, open_registry
from actors.registry.wire import DataVersion, TopicConfig, body_crc32
from protocol import names
from protocol.client import RemotingClient
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand

from .helpers import call, local_config, register_request, route, topics, wait_for_route

A_MASTER, B_MASTER, A_SLAVE = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"


async def register_cluster(client: RemotingClient, address: str) -> list[RemotingCommand]:
    """broker-a (master + slave) and broker-b (master) of DefaultCluster."""
    replies = []
    for request in (
        register_request(
            "broker-a", 0, A_MASTER, topics(("T", 4), (names.AUTO_CREATE_TOPIC_KEY_TOPIC, 8))
        ),
        register_request("broker-b", 0, B_MASTER, topics(("T", 2))),
        register_request(
            "broker-a", 1, A_SLAVE, topics(("T", 4), (names.AUTO_CREATE_TOPIC_KEY_TOPIC, 8))
        ),
    ):
        with trio.fail_after(5):
            replies.append(await client.invoke(address, request))
    return replies


def queue(name: str, n: int, perm: int = 6, flag: int = 0) -> dict[str, object]:
    return {
        "brokerName": name,
        "perm": perm,
        "readQueueNums": n,
        "topicSynFlag": flag,
        "topicSysFlag": flag,
        "writeQueueNums": n,
    }


BROKER_A = {
    "brokerAddrs": {"0": A_MASTER, "1": A_SLAVE},
    "brokerName": "broker-a",
    "cluster": "DefaultCluster",
}
BROKER_B = {"brokerAddrs": {"0": B_MASTER}, "brokerName": "broker-b", "cluster": "DefaultCluster"}


async def test_two_masters_and_a_slave(registry: Registry, client: RemotingClient) -> None:
    master_a, master_b, slave = await register_cluster(client, registry.address)
    assert master_a.code == ResponseCode.SUCCESS and master_a.ext_fields == {}
    assert master_b.ext_fields == {}
    assert slave.code == ResponseCode.SUCCESS
    assert slave.ext_fields == {"masterAddr": A_MASTER, "haServerAddr": "10.0.0.1:10912"}

    response = await call(
        client, registry.address, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}
    )
    assert response.code == ResponseCode.SUCCESS
    raw = bytes(response.body or b"")
    assert b" " not in raw and b'"0":"10.0.0.1:10911"' in raw
    assert orjson.loads(raw) == {
        "brokerDatas": [BROKER_A, BROKER_B],
        "filterServerTable": {},
        "queueDatas": [queue("broker-a", 4), queue("broker-b", 2)],
    }
    assert await route(client, registry.address, names.AUTO_CREATE_TOPIC_KEY_TOPIC) == {
        "brokerDatas": [BROKER_A],
        "filterServerTable": {},
        "queueDatas": [queue("broker-a", 8)],
    }
    missing = await call(
        client, registry.address, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"}
    )
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST and "Nope" in (missing.remark or "")

    info = await call(client, registry.address, RequestCode.GET_BROKER_CLUSTER_INFO)
    assert orjson.loads(info.body or b"") == {
        "brokerAddrTable": {"broker-a": BROKER_A, "broker-b": BROKER_B},
        "clusterAddrTable": {"DefaultCluster": ["broker-a", "broker-b"]},
    }
    stats = registry.statistics()
    assert (stats.actor.routes.topics, stats.actor.routes.live_brokers) == (2, 3)
    assert stats.actor.routes.route_queries >= 3 and stats.server.connections >= 1


async def test_compressed_registration_and_filter_servers(
    registry: Registry, client: RemotingClient
) -> None:
    request = register_request(
        "broker-a", 0, A_MASTER, topics(("Z", 3)), compressed=True, filter_servers=("f:1",)
    )
    with trio.fail_after(5):
        response = await client.invoke(registry.address, request)
    assert response.code == ResponseCode.SUCCESS
    assert await route(client, registry.address, "Z") == {
        "brokerDatas": [
            {"brokerAddrs": {"0": A_MASTER}, "brokerName": "broker-a", "cluster": "DefaultCluster"}
        ],
        "filterServerTable": {A_MASTER: ["f:1"]},
        "queueDatas": [queue("broker-a", 3)],
    }


async def test_connection_close_removes_broker_and_it_comes_back(registry: Registry) -> None:
    async with RemotingClient() as reader:
        async with RemotingClient() as broker:
            with trio.fail_after(5):
                await broker.invoke(
                    registry.address, register_request("broker-a", 0, A_MASTER, topics(("T", 4)))
                )
            assert await route(reader, registry.address, "T") is not None
        # The broker's connection closed: its route goes at once, not after 120 s.
        await wait_for_route(reader, registry.address, "T", present=False)
        info = await call(reader, registry.address, RequestCode.GET_BROKER_CLUSTER_INFO)
        assert orjson.loads(info.body or b"") == {"brokerAddrTable": {}, "clusterAddrTable": {}}
        async with RemotingClient() as broker:
            with trio.fail_after(5):
                await broker.invoke(
                    registry.address, register_request("broker-a", 0, A_MASTER, topics(("T", 4)))
                )
            found = await route(reader, registry.address, "T")
            assert found is not None and found["queueDatas"] == [queue("broker-a", 4)]


async def test_unchanged_data_version_is_honoured(
    registry: Registry, client: RemotingClient
) -> None:
    version = DataVersion(timestamp=1700000000000, counter=5)
    await client.invoke(
        registry.address,
        register_request("broker-a", 0, A_MASTER, topics(("T", 4)), version=version),
    )
    query = {
        "brokerName": "broker-a",
        "brokerAddr": A_MASTER,
        "clusterName": "DefaultCluster",
        "brokerId": "0",
    }
    same = await call(
        client, registry.address, RequestCode.QUERY_DATA_VERSION, query, version.to_json()
    )
    assert same.code == ResponseCode.SUCCESS and same.ext_fields == {"changed": "false"}
    assert orjson.loads(same.body or b"") == {"counter": 5, "timestamp": 1700000000000}
    newer = await call(
        client,
        registry.address,
        RequestCode.QUERY_DATA_VERSION,
        query,
        DataVersion(timestamp=1700000000001, counter=6).to_json(),
    )
    assert newer.ext_fields == {"changed": "true"}
    # Same data version, different topic table: the registry keeps what it has.
    await client.invoke(
        registry.address,
        register_request("broker-a", 0, A_MASTER, topics(("T", 8)), version=version),
    )
    assert (await route(client, registry.address, "T") or {})["queueDatas"] == [
        queue("broker-a", 4)
    ]
    await client.invoke(
        registry.address,
        register_request(
            "broker-a",
            0,
            A_MASTER,
            topics(("T", 8)),
            version=DataVersion(timestamp=1700000000001, counter=6),
        ),
    )
    assert (await route(client, registry.address, "T") or {})["queueDatas"] == [
        queue("broker-a", 8)
    ]


async def test_unregister_removes_broker_queues_and_empty_cluster(
    registry: Registry, client: RemotingClient
) -> None:
    await register_cluster(client, registry.address)
    for name, broker_id, addr in (("broker-b", 0, B_MASTER),):
        response = await call(
            client,
            registry.address,
            RequestCode.UNREGISTER_BROKER,
            {
                "brokerName": name,
                "brokerAddr": addr,
                "clusterName": "DefaultCluster",
                "brokerId": str(broker_id),
            },
        )
        assert response.code == ResponseCode.SUCCESS
    assert (await route(client, registry.address, "T") or {})["queueDatas"] == [
        queue("broker-a", 4)
    ]
    for broker_id, addr in ((0, A_MASTER), (1, A_SLAVE)):
        await call(
            client,
            registry.address,
            RequestCode.UNREGISTER_BROKER,
            {
                "brokerName": "broker-a",
                "brokerAddr": addr,
                "clusterName": "DefaultCluster",
                "brokerId": str(broker_id),
            },
        )
    assert await route(client, registry.address, "T") is None
    info = await call(client, registry.address, RequestCode.GET_BROKER_CLUSTER_INFO)
    assert orjson.loads(info.body or b"") == {"brokerAddrTable": {}, "clusterAddrTable": {}}


async def test_two_unlinked_registries_serve_the_same_routes(tmp_path: Path) -> None:
    async with RemotingClient() as client, trio.open_nursery() as nursery:
        first = await nursery.start(Registry(local_config(tmp_path / "1")).run)
        async with open_registry(local_config(tmp_path / "2")) as second:
            for registry in (first, second):
                await register_cluster(client, registry.address)
            one = await route(client, first.address, "T")
            two = await route(client, second.address, "T")
            assert one is not None and one == two
            nursery.cancel_scope.cancel()  # the first registry stops
            with trio.fail_after(5):
                while True:
                    try:
                        await client.invoke(
                            first.address,
                            RemotingCommand.request(
                                RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}
                            ),
                            0.5,
                        )
                    except Exception:
                        break
                    await trio.sleep(0.01)
            assert await route(client, second.address, "T") == two


async def test_order_topic_kv_survives_restart(tmp_path: Path, client: RemotingClient) -> None:
    config = local_config(tmp_path, order_message_enable=True)
    async with open_registry(config) as registry:
        put = await call(
            client,
            registry.address,
            RequestCode.PUT_KV_CONFIG,
            {"namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "broker-a:8;broker-b:8"},
        )
        assert put.code == ResponseCode.SUCCESS
    assert (tmp_path / "kvConfig.json").exists()
    client.close_all()
    async with open_registry(local_config(tmp_path, order_message_enable=True)) as registry:
        got = await call(
            client,
            registry.address,
            RequestCode.GET_KV_CONFIG,
            {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"},
        )
        assert got.code == ResponseCode.SUCCESS
        assert got.ext_fields == {"value": "broker-a:8;broker-b:8"}
        reply = await client.invoke(
            registry.address, register_request("broker-a", 0, A_MASTER, topics(("T", 8)))
        )
        # The broker learns the order topics from its registration's answer.
        assert orjson.loads(reply.body or b"") == {"table": {"T": "broker-a:8;broker-b:8"}}
        found = await route(client, registry.address, "T")
        assert found is not None and found["orderTopicConf"] == "broker-a:8;broker-b:8"


async def test_order_topic_conf_needs_order_message_enable(
    registry: Registry, client: RemotingClient
) -> None:
    await call(
        client,
        registry.address,
        RequestCode.PUT_KV_CONFIG,
        {"namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "broker-a:4"},
    )
    await client.invoke(
        registry.address, register_request("broker-a", 0, A_MASTER, topics(("T", 4)))
    )
    assert "orderTopicConf" not in (await route(client, registry.address, "T") or {})
    update = await call(
        client,
        registry.address,
        RequestCode.UPDATE_NAMESRV_CONFIG,
        None,
        b"orderMessageEnable=true\n",
    )
    assert update.code == ResponseCode.SUCCESS
    assert (await route(client, registry.address, "T") or {})["orderTopicConf"] == "broker-a:4"


async def test_corrupt_kv_config_is_reported_not_erased(tmp_path: Path) -> None:
    path = tmp_path / "kvConfig.json"
    corrupt = b'{"configTable": {"ORDER_TOPIC_CONFIG": {"T": '
    path.write_bytes(corrupt)
    with pytest.raises(KVConfigError, match=re.escape(str(path))):
        async with open_registry(local_config(tmp_path)):
            pass  # pragma: no cover - never reached
    assert path.read_bytes() == corrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kvConfig.json"]


async def test_kv_config_commands(registry: Registry, client: RemotingClient) -> None:
    address = registry.address
    for key, value in (("a", "1"), ("b", "2")):
        await call(
            client,
            address,
            RequestCode.PUT_KV_CONFIG,
            {"namespace": "NS", "key": key, "value": value},
        )
    listed = await call(client, address, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "NS"})
    assert orjson.loads(listed.body or b"") == {"table": {"a": "1", "b": "2"}}
    deleted = await call(
        client, address, RequestCode.DELETE_KV_CONFIG, {"namespace": "NS", "key": "a"}
    )
    assert deleted.code == ResponseCode.SUCCESS
    gone = await call(client, address, RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "a"})
    assert gone.code == ResponseCode.QUERY_NOT_FOUND and "a" in (gone.remark or "")
    none = await call(client, address, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "X"})
    assert none.code == ResponseCode.QUERY_NOT_FOUND


async def test_topic_lists_and_admin_commands(registry: Registry, client: RemotingClient) -> None:
    address = registry.address
    await register_cluster(client, address)
    unit = [
        TopicConfig(topic_name="U", read_queue_nums=1, write_queue_nums=1, topic_sys_flag=1),
        TopicConfig(topic_name="S", read_queue_nums=1, write_queue_nums=1, topic_sys_flag=2),
    ]
    await client.invoke(
        address, register_request("broker-c", 0, "10.0.0.9:10911", unit, cluster="Other")
    )

    async def topic_list(code: int, ext: dict[str, str] | None = None) -> dict[str, object]:
        response = await call(client, address, code, ext)
        assert response.code == ResponseCode.SUCCESS, response
        result: dict[str, object] = orjson.loads(response.body or b"")
        return result

    everything = await topic_list(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert sorted(everything["topicList"]) == ["S", "T", names.AUTO_CREATE_TOPIC_KEY_TOPIC, "U"]  # type: ignore[call-overload]
    by_cluster = await topic_list(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "Other"})
    assert sorted(by_cluster["topicList"]) == ["S", "U"]  # type: ignore[call-overload]
    system = await topic_list(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)
    assert system == {
        "brokerAddr": A_MASTER,
        "topicList": ["DefaultCluster", "broker-a", "broker-b", "Other", "broker-c"],
    }
    assert await topic_list(RequestCode.GET_UNIT_TOPIC_LIST) == {"topicList": ["U"]}
    assert await topic_list(RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST) == {"topicList": ["S"]}
    assert await topic_list(RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST) == {"topicList": ["S"]}

    wipe = await call(
        client, address, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}
    )
    assert wipe.ext_fields == {"wipeTopicCount": "2"}
    assert (await route(client, address, "T") or {})["queueDatas"] == [
        queue("broker-a", 4, perm=4),
        queue("broker-b", 2),
    ]
    add = await call(
        client, address, RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}
    )
    assert add.ext_fields == {"addTopicCount": "2"}
    assert (await route(client, address, "T") or {})["queueDatas"] == [
        queue("broker-a", 4),
        queue("broker-b", 2),
    ]

    deleted = await call(client, address, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T"})
    assert deleted.code == ResponseCode.SUCCESS
    assert await route(client, address, "T") is None

    config = await call(client, address, RequestCode.GET_NAMESRV_CONFIG)
    text = bytes(config.body or b"").decode()
    assert "brokerExpiredMillis=120000" in text and "orderMessageEnable=false" in text
    refused = await call(
        client, address, RequestCode.UPDATE_NAMESRV_CONFIG, None, b"listenPort=1\n"
    )
    assert refused.code == ResponseCode.NO_PERMISSION and "listenPort" in (refused.remark or "")
    updated = await call(
        client, address, RequestCode.UPDATE_NAMESRV_CONFIG, None, b"brokerExpiredMillis=60000\n"
    )
    assert updated.code == ResponseCode.SUCCESS
    assert registry.config.broker_expired_millis == 60000


async def test_websocket_on_any_path(tmp_path: Path, client: RemotingClient) -> None:
    async with open_registry(local_config(tmp_path, websocket_listen_port=0)) as registry:
        assert registry.websocket_port is None  # 0 = off
    config = local_config(tmp_path)
    async with open_registry(config) as plain:
        assert plain.websocket_address is None
    # Ask the OS for a free port by binding one, then give it to the registry.
    probe = trio.socket.socket()
    await probe.bind(("127.0.0.1", 0))
    free = probe.getsockname()[1]
    probe.close()
    async with open_registry(local_config(tmp_path, websocket_listen_port=free)) as registry:
        ws = f"ws://127.0.0.1:{registry.websocket_port}/any/path/at/all"
        request = register_request("broker-a", 0, A_MASTER, topics(("W", 2)))
        assert request.ext_fields is not None
        request.ext_fields["websocketAddr"] = "ws://10.0.0.1:10913/"
        with trio.fail_after(5):
            reply = await client.invoke(ws, request)
        assert reply.code == ResponseCode.SUCCESS
        # The same route, with the broker's websocket address for a websocket client.
        over_tcp = await route(client, registry.address, "W")
        over_ws = await route(client, ws, "W")
        assert over_tcp is not None and over_ws is not None
        assert over_ws["queueDatas"] == over_tcp["queueDatas"]
        assert over_ws["brokerDatas"] == [
            {"brokerAddrs": {"0": "ws://10.0.0.1:10913/"}, "brokerName": "broker-a",
             "cluster": "DefaultCluster"}
        ]  # fmt: skip


# ------------------------------------------------------------------------------ bad input


async def assert_unchanged(client: RemotingClient, address: str, before: bytes) -> None:
    info = await call(client, address, RequestCode.GET_BROKER_CLUSTER_INFO)
    assert info.body == before


async def test_bad_input_gets_clear_errors_and_changes_nothing(
    registry: Registry, client: RemotingClient
) -> None:
    address = registry.address
    await client.invoke(address, register_request("broker-a", 0, A_MASTER, topics(("T", 4))))
    before = (await call(client, address, RequestCode.GET_BROKER_CLUSTER_INFO)).body or b""
    route_before = await route(client, address, "T")

    unknown = await call(client, address, 4242)
    assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "4242" in (
        unknown.remark or ""
    )

    no_topic = await call(client, address, RequestCode.GET_ROUTEINFO_BY_TOPIC, {})
    assert no_topic.code == ResponseCode.SYSTEM_ERROR
    assert "GetRouteInfoRequestHeader" in (no_topic.remark or "") and "'topic'" in (
        no_topic.remark or ""
    )

    good = register_request("broker-x", 0, "10.9.9.9:10911", topics(("X", 1)))
    ext = dict(good.ext_fields or {})
    del ext["brokerName"]
    missing = await call(client, address, RequestCode.REGISTER_BROKER, ext, bytes(good.body or b""))
    assert missing.code == ResponseCode.SYSTEM_ERROR and "'brokerName'" in (missing.remark or "")

    bad_id = await call(
        client,
        address,
        RequestCode.REGISTER_BROKER,
        {**(good.ext_fields or {}), "brokerId": "one"},
        bytes(good.body or b""),
    )
    assert bad_id.code == ResponseCode.SYSTEM_ERROR and "brokerId" in (bad_id.remark or "")

    wrong_crc = await call(
        client,
        address,
        RequestCode.REGISTER_BROKER,
        {**(good.ext_fields or {}), "bodyCrc32": "12345"},
        bytes(good.body or b""),
    )
    assert wrong_crc.code == ResponseCode.SYSTEM_ERROR
    assert "crc32 not match" in (wrong_crc.remark or "")

    garbage = b'{"topicConfigSerializeWrapper": '
    bad_json = await call(
        client,
        address,
        RequestCode.REGISTER_BROKER,
        {**(good.ext_fields or {}), "bodyCrc32": str(body_crc32(garbage))},
        garbage,
    )
    assert bad_json.code == ResponseCode.SYSTEM_ERROR
    assert "RegisterBrokerBody" in (bad_json.remark or "")

    bad_zlib = await call(
        client,
        address,
        RequestCode.REGISTER_BROKER,
        {**(good.ext_fields or {}), "compressed": "true", "bodyCrc32": "0"},
        b"not zlib",
    )
    assert bad_zlib.code == ResponseCode.SYSTEM_ERROR and "compressed RegisterBrokerBody" in (
        bad_zlib.remark or ""
    )

    bad_version = await call(
        client,
        address,
        RequestCode.QUERY_DATA_VERSION,
        {
            "brokerName": "broker-a",
            "brokerAddr": A_MASTER,
            "clusterName": "DefaultCluster",
            "brokerId": "0",
        },
        b"[1,2",
    )
    assert bad_version.code == ResponseCode.SYSTEM_ERROR

    no_ns = await call(client, address, RequestCode.PUT_KV_CONFIG, {"key": "k", "value": "v"})
    assert no_ns.code == ResponseCode.SYSTEM_ERROR and "'namespace'" in (no_ns.remark or "")
    bad_config = await call(
        client, address, RequestCode.UPDATE_NAMESRV_CONFIG, None, b"brokerExpiredMillis=soon\n"
    )
    assert bad_config.code == ResponseCode.SYSTEM_ERROR
    assert "brokerExpiredMillis" in (bad_config.remark or "")

    await assert_unchanged(client, address, before)
    assert await route(client, address, "T") == route_before
    assert await route(client, address, "X") is None
    assert registry.config.broker_expired_millis == 120000
    # The connection survived every error.
    assert (await call(client, address, RequestCode.GET_BROKER_CLUSTER_INFO)).code == 0
