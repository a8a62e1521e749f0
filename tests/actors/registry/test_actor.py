"""RegistryActor on a mock clock: liveness expiry, closed connections, data versions, KV.

Timed cases drive the actor and its scanner directly (no sockets): MockClock's autojump and
real socket I/O do not mix.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import orjson
import pytest
import trio
import trio.testing

from actors.registry.actor import (
    DeleteKVConfig,
    PutKVConfig,
    QueryDataVersion,
    RegisterBroker,
    RegistryActor,
    UpdateConfig,
)
from actors.registry.config import ConfigError, RegistryConfig
from actors.registry.kv_config import KVConfig


@attrs.frozen
class Topic:
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = 6
    topic_sys_flag: int = 0


class FakeConnection:
    """Stands in for a remoting Connection: records close() calls."""

    def __init__(self) -> None:
        self.closed_with: str | None = None

    def close(self, reason: str) -> None:
        self.closed_with = reason


def registration(
    name: str = "broker-a",
    addr: str = "a:10911",
    version: object = (1, 1),
    connection: object | None = None,
    broker_id: int = 0,
) -> RegisterBroker:
    return RegisterBroker(
        cluster="DefaultCluster",
        broker_addr=addr,
        broker_name=name,
        broker_id=broker_id,
        ha_server_addr="a:10912",
        data_version=version,
        topic_config_table={"T": Topic()},
        connection=connection,
    )


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def drained(actor: RegistryActor) -> None:
    """Wait until every queued cast has been applied."""
    with trio.fail_after(5):
        while actor.statistics().mailbox_used:
            await trio.sleep(0.001)
        # A query goes through the mailbox behind whatever is in hand.
        await actor.call(QueryDataVersion("barrier:0", None))


async def start(nursery: trio.Nursery, config: RegistryConfig | None = None) -> RegistryActor:
    actor = RegistryActor(config or RegistryConfig(kv_config_path=None))
    await nursery.start(actor.run)
    return actor


async def test_expiry_after_120s_without_registration(
    mock_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    actor = await start(nursery)
    conn = FakeConnection()
    start_time = trio.current_time()
    await actor.call(registration(connection=conn))
    await actor.call(registration("broker-b", "b:10911"))
    await trio.sleep(100)
    await actor.call(registration("broker-b", "b:10911"))  # b keeps registering
    # Scans every 10 s: broker-a expires at the first scan after 120 s.
    while "a:10911" in actor.route_table.broker_live_table:
        await trio.sleep(1)
    elapsed = trio.current_time() - start_time
    assert 120 < elapsed <= 131
    assert conn.closed_with is not None and "expired" in conn.closed_with
    assert list(actor.route_table.topic_queue_table["T"]) == ["broker-b"]
    assert "broker-a" not in actor.route_table.broker_addr_table
    assert actor.statistics().brokers_dropped == 1


async def test_expiry_is_configurable(
    mock_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    config = RegistryConfig(
        kv_config_path=None, broker_expired_millis=5_000, scan_not_active_broker_interval=1_000
    )
    actor = await start(nursery, config)
    await actor.call(registration())
    await trio.sleep(4.5)
    assert "a:10911" in actor.route_table.broker_live_table
    await trio.sleep(2)
    assert actor.route_table.broker_live_table == {}
    assert actor.route_table.topic_queue_table == {}


async def test_registering_keeps_broker_alive_and_it_comes_back_after_expiry(
    mock_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    actor = await start(nursery)
    for _ in range(10):
        await actor.call(registration())
        await trio.sleep(30)
    assert "a:10911" in actor.route_table.broker_live_table
    await trio.sleep(200)
    assert actor.route_table.route_json("T") is None
    await actor.call(registration())
    assert actor.route_table.route_json("T") is not None


async def test_unchanged_data_version_refreshes_last_update(
    mock_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    actor = await start(nursery)
    await actor.call(registration(version=(7, 700)))
    for _ in range(10):
        await trio.sleep(30)
        changed, stored = await actor.call(QueryDataVersion("a:10911", (7, 700)))
        assert not changed and stored == (7, 700)
    assert "a:10911" in actor.route_table.broker_live_table  # 300 s, kept alive by queries
    changed, stored = await actor.call(QueryDataVersion("a:10911", (8, 800)))
    assert changed and stored == (7, 700)
    changed, stored = await actor.call(QueryDataVersion("zz:1", (7, 700)))
    assert changed and stored is None


async def test_connection_close_drops_its_brokers_only(nursery: trio.Nursery) -> None:
    actor = await start(nursery)
    conn_a, conn_b = FakeConnection(), FakeConnection()
    await actor.call(registration(connection=conn_a))
    await actor.call(registration("broker-b", "b:10911", connection=conn_b))
    actor.notify_connection_closed(conn_a, "peer closed the connection")
    await drained(actor)
    assert list(actor.route_table.broker_live_table) == ["b:10911"]
    assert list(actor.route_table.topic_queue_table["T"]) == ["broker-b"]
    # A broker that re-registered over a new connection survives its old connection closing.
    conn_b2 = FakeConnection()
    await actor.call(registration("broker-b", "b:10911", connection=conn_b2))
    actor.notify_connection_closed(conn_b, "peer closed the connection")
    await drained(actor)
    assert list(actor.route_table.broker_live_table) == ["b:10911"]


async def test_kv_put_delete_persist_and_order_conf(tmp_path: Path, nursery: trio.Nursery) -> None:
    path = tmp_path / "kvConfig.json"
    config = RegistryConfig(kv_config_path=str(path), order_message_enable=True)
    actor = RegistryActor(config, kv_config=KVConfig(path))
    await nursery.start(actor.run)
    await actor.call(registration())
    before = actor.route_table.route_json("T")
    assert b"orderTopicConf" not in (before or b"")
    await actor.call(PutKVConfig("ORDER_TOPIC_CONFIG", "T", "broker-a:4"))
    assert orjson.loads(path.read_bytes()) == {
        "configTable": {"ORDER_TOPIC_CONFIG": {"T": "broker-a:4"}}
    }
    assert b'"orderTopicConf":"broker-a:4"' in (actor.route_table.route_json("T") or b"")
    await actor.call(UpdateConfig({"orderMessageEnable": "false"}))
    assert b"orderTopicConf" not in (actor.route_table.route_json("T") or b"")
    await actor.call(DeleteKVConfig("ORDER_TOPIC_CONFIG", "T"))
    assert orjson.loads(path.read_bytes()) == {"configTable": {}}


async def test_bad_config_update_changes_nothing(nursery: trio.Nursery) -> None:
    actor = await start(nursery)
    with pytest.raises(ConfigError, match="kvConfigPath"):
        await actor.call(UpdateConfig({"brokerExpiredMillis": "5", "kvConfigPath": "/x"}))
    with pytest.raises(ConfigError, match="bogus"):
        await actor.call(UpdateConfig({"bogus": "1"}))
    with pytest.raises(ConfigError, match="brokerExpiredMillis"):
        await actor.call(UpdateConfig({"brokerExpiredMillis": "soon"}))
    assert actor.config.broker_expired_millis == 120_000
    await actor.call(UpdateConfig({"brokerExpiredMillis": "5000"}))
    assert actor.config.broker_expired_millis == 5000
