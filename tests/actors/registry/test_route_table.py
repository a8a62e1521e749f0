"""RouteTable unit tests: pure state, no sockets, no clock."""

from __future__ import annotations

import attrs
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.registry.route_table import RouteTable
from protocol import names


@attrs.frozen
class Topic:
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = 6
    topic_sys_flag: int = 0


def register(
    table: RouteTable,
    name: str,
    broker_id: int,
    addr: str,
    topics: dict[str, Topic] | None = None,
    version: object = (1, 1),
    cluster: str = "DefaultCluster",
    now: float = 0.0,
    connection: object | None = None,
) -> object:
    return table.register_broker(
        cluster=cluster,
        broker_addr=addr,
        broker_name=name,
        broker_id=broker_id,
        ha_server_addr=addr.replace(":10911", ":10912"),
        data_version=version,
        topic_config_table=topics if topics is not None else {},
        connection=connection,
        now=now,
    )


def two_masters_and_a_slave() -> RouteTable:
    table = RouteTable()
    register(
        table,
        "broker-a",
        0,
        "10.0.0.1:10911",
        {"T": Topic(), names.AUTO_CREATE_TOPIC_KEY_TOPIC: Topic(8, 8, 7)},
    )
    register(table, "broker-b", 0, "10.0.0.2:10911", {"T": Topic(2, 2)})
    register(table, "broker-a", 1, "10.0.0.3:10911", {"T": Topic(16, 16)})
    return table


def test_route_of_two_masters_and_a_slave() -> None:
    table = two_masters_and_a_slave()
    assert orjson.loads(table.route_json("T") or b"") == {
        "brokerDatas": [
            {
                "brokerAddrs": {"0": "10.0.0.1:10911", "1": "10.0.0.3:10911"},
                "brokerName": "broker-a",
                "cluster": "DefaultCluster",
            },
            {
                "brokerAddrs": {"0": "10.0.0.2:10911"},
                "brokerName": "broker-b",
                "cluster": "DefaultCluster",
            },
        ],
        "filterServerTable": {},
        "queueDatas": [
            {
                "brokerName": "broker-a",
                "perm": 6,
                "readQueueNums": 4,
                "topicSynFlag": 0,
                "topicSysFlag": 0,
                "writeQueueNums": 4,
            },
            {
                "brokerName": "broker-b",
                "perm": 6,
                "readQueueNums": 2,
                "topicSynFlag": 0,
                "topicSysFlag": 0,
                "writeQueueNums": 2,
            },
        ],
    }
    assert table.route_json("nope") is None


def test_route_json_is_compact_with_quoted_numeric_keys() -> None:
    raw = two_masters_and_a_slave().route_json("T") or b""
    assert b" " not in raw and b"\n" not in raw
    assert b'{"0":"10.0.0.1:10911","1":"10.0.0.3:10911"}' in raw


def test_slave_learns_master_and_master_learns_nothing() -> None:
    table = RouteTable()
    orphan = register(table, "broker-a", 1, "10.0.0.3:10911")
    assert (orphan.master_addr, orphan.ha_server_addr) == (None, None)  # type: ignore[attr-defined]
    master = register(table, "broker-a", 0, "10.0.0.1:10911", {"T": Topic()})
    assert master.master_addr is None  # type: ignore[attr-defined]
    slave = register(table, "broker-a", 1, "10.0.0.3:10911")
    assert slave.master_addr == "10.0.0.1:10911"  # type: ignore[attr-defined]
    assert slave.ha_server_addr == "10.0.0.1:10912"  # type: ignore[attr-defined]


def test_cluster_info() -> None:
    info = two_masters_and_a_slave().cluster_info()
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a", "broker-b"]}
    assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {
        "0": "10.0.0.1:10911",
        "1": "10.0.0.3:10911",
    }


def test_unchanged_data_version_keeps_queue_data() -> None:
    table = RouteTable()
    register(table, "broker-a", 0, "a:1", {"T": Topic(4, 4)}, version=(1, 100))
    register(table, "broker-a", 0, "a:1", {"T": Topic(8, 8)}, version=(1, 100))
    assert table.topic_queue_table["T"]["broker-a"].read_queue_nums == 4
    register(table, "broker-a", 0, "a:1", {"T": Topic(8, 8)}, version=(2, 200))
    assert table.topic_queue_table["T"]["broker-a"].read_queue_nums == 8


def test_cache_is_dropped_on_change() -> None:
    table = RouteTable()
    register(table, "broker-a", 0, "a:1", {"T": Topic(4, 4)}, version=(1, 1))
    first = table.route_json("T")
    assert table.route_json("T") is first  # cached
    register(table, "broker-a", 0, "a:1", {"T": Topic(8, 8)}, version=(2, 2))
    assert b'"readQueueNums":8' in (table.route_json("T") or b"")
    register(table, "broker-a", 1, "s:1", version=(2, 2))  # new address of the broker
    assert b'"1":"s:1"' in (table.route_json("T") or b"")
    table.set_write_perm("broker-a", writable=False)
    assert b'"perm":4' in (table.route_json("T") or b"")
    table.drop_broker("s:1", "test")
    assert b'"1":"s:1"' not in (table.route_json("T") or b"")


def test_slave_promoted_to_master_moves_id() -> None:
    table = RouteTable()
    register(table, "broker-a", 0, "m:1", {"T": Topic()})
    register(table, "broker-a", 1, "s:1")
    table.drop_broker("m:1", "connection closed")
    register(table, "broker-a", 0, "s:1", {"T": Topic()}, version=(9, 9))
    assert table.broker_addr_table["broker-a"].broker_addrs == {0: "s:1"}


def test_unregister_removes_queues_and_empty_clusters() -> None:
    table = two_masters_and_a_slave()
    table.unregister_broker(
        cluster="DefaultCluster", broker_addr="10.0.0.2:10911", broker_name="broker-b", broker_id=0
    )
    assert list(table.topic_queue_table["T"]) == ["broker-a"]
    assert table.cluster_addr_table == {"DefaultCluster": {"broker-a"}}
    # The master leaves but the slave stays: broker-a keeps its queues (Java behaviour).
    table.unregister_broker(
        cluster="DefaultCluster", broker_addr="10.0.0.1:10911", broker_name="broker-a", broker_id=0
    )
    assert "T" in table.topic_queue_table
    table.unregister_broker(
        cluster="DefaultCluster", broker_addr="10.0.0.3:10911", broker_name="broker-a", broker_id=1
    )
    assert table.topic_queue_table == {}
    assert table.cluster_addr_table == {}
    assert table.broker_addr_table == {}
    assert table.broker_live_table == {}


def test_drop_removes_addresses_queues_topics_and_clusters() -> None:
    table = RouteTable()
    register(table, "broker-a", 0, "a:1", {"T": Topic(), "OnlyA": Topic()}, cluster="C1")
    register(table, "broker-b", 0, "b:1", {"T": Topic()}, cluster="C2")
    assert table.drop_broker("a:1", "expired")
    assert "OnlyA" not in table.topic_queue_table
    assert list(table.topic_queue_table["T"]) == ["broker-b"]
    assert table.cluster_addr_table == {"C2": {"broker-b"}}
    assert not table.drop_broker("a:1", "again")


def test_expired_and_refresh() -> None:
    table = RouteTable()
    register(table, "broker-a", 0, "a:1", now=0.0)
    register(table, "broker-b", 0, "b:1", now=50.0)
    assert table.expired(now=121.0, expiry=120.0) == ["a:1"]
    assert table.refresh("a:1", now=100.0)
    assert table.expired(now=121.0, expiry=120.0) == []
    assert not table.refresh("zz:1", now=1.0)


def test_delete_topic_whole_and_per_cluster() -> None:
    table = RouteTable()
    register(table, "broker-a", 0, "a:1", {"T": Topic(), "U": Topic()}, cluster="C1")
    register(table, "broker-b", 0, "b:1", {"T": Topic()}, cluster="C2")
    assert table.delete_topic("T", cluster="C1")
    assert list(table.topic_queue_table["T"]) == ["broker-b"]
    assert table.delete_topic("U")
    assert "U" not in table.topic_queue_table
    assert not table.delete_topic("nope")


def test_write_perm_counts() -> None:
    table = RouteTable()
    register(table, "broker-a", 0, "a:1", {"T": Topic(perm=6), "U": Topic(perm=7)})
    assert table.set_write_perm("broker-a", writable=False) == 2
    assert {q["broker-a"].perm for q in table.topic_queue_table.values()} == {4, 5}
    assert table.set_write_perm("broker-a", writable=True) == 2
    assert {q["broker-a"].perm for q in table.topic_queue_table.values()} == {6}
    assert table.set_write_perm("broker-x", writable=True) == 0


def test_topic_lists() -> None:
    table = RouteTable()
    register(
        table,
        "broker-a",
        0,
        "a:1",
        {"T": Topic(), "UNIT": Topic(topic_sys_flag=1), "SUB": Topic(topic_sys_flag=2)},
        cluster="C1",
    )
    register(table, "broker-b", 0, "b:1", {"B": Topic()}, cluster="C2")
    assert sorted(table.all_topics()) == ["B", "SUB", "T", "UNIT"]
    assert sorted(table.topics_by_cluster("C1")) == ["SUB", "T", "UNIT"]
    assert table.topics_by_cluster("nope") == []
    assert table.topics_with_sys_flag(True, None) == ["UNIT"]
    assert table.topics_with_sys_flag(None, True) == ["SUB"]
    assert table.topics_with_sys_flag(False, True) == ["SUB"]
    topics, addr = table.system_topics()
    assert topics == ["C1", "broker-a", "C2", "broker-b"]
    assert addr == "a:1"


def test_order_topic_conf_in_route() -> None:
    conf = {"T": "broker-a:4"}
    table = RouteTable(order_topic_conf=conf.get)
    register(table, "broker-a", 0, "a:1", {"T": Topic(), "U": Topic()})
    assert orjson.loads(table.route_json("T") or b"")["orderTopicConf"] == "broker-a:4"
    assert "orderTopicConf" not in orjson.loads(table.route_json("U") or b"")


def test_filter_servers_in_route() -> None:
    table = RouteTable()
    table.register_broker(
        cluster="C",
        broker_addr="a:1",
        broker_name="broker-a",
        broker_id=0,
        ha_server_addr="a:2",
        data_version=(1, 1),
        topic_config_table={"T": Topic()},
        filter_server_list=["f:1"],
        now=0.0,
    )
    assert orjson.loads(table.route_json("T") or b"")["filterServerTable"] == {"a:1": ["f:1"]}


events = st.lists(
    st.tuples(
        st.sampled_from(["reg", "unreg", "drop", "delete", "wipe"]),
        st.sampled_from(["broker-a", "broker-b"]),
        st.integers(0, 1),
        st.sampled_from(["C1", "C2"]),
        st.integers(0, 3),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(events)
def test_cached_route_always_equals_a_fresh_encoding(
    ops: list[tuple[str, str, int, str, int]],
) -> None:
    table = RouteTable()
    for op, name, broker_id, cluster, version in ops:
        addr = f"{name}-{broker_id}:1"
        topics = {f"T{i}": Topic(version + 1, version + 1) for i in range(version)}
        if op == "reg":
            register(table, name, broker_id, addr, topics, version=version, cluster=cluster)
        elif op == "unreg":
            table.unregister_broker(
                cluster=cluster, broker_addr=addr, broker_name=name, broker_id=broker_id
            )
        elif op == "drop":
            table.drop_broker(addr, "test")
        elif op == "delete":
            table.delete_topic(f"T{version}")
        else:
            table.set_write_perm(name, writable=bool(version % 2))
        for topic in ["T0", "T1", "T2"]:
            cached = table.route_json(topic)
            fresh = table.route(topic)
            assert (cached is None) == (fresh is None)
            if fresh is not None:
                assert orjson.loads(cached or b"") == fresh
        # Invariants: no empty topic, no empty cluster, every queue's broker name known or
        # awaiting its last address to go.
        assert all(table.topic_queue_table.values())
        assert all(table.cluster_addr_table.values())
        assert all(b.broker_addrs for b in table.broker_addr_table.values())
