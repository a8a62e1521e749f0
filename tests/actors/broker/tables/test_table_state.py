"""The rules of the broker's table states, on plain objects: no broker, no actor, no clock.

Times are passed in (``now_ms`` stamps data versions, ``now`` drives expiry), as the actors do.
"""

from __future__ import annotations

import attrs
import orjson

from actors.broker.config import BrokerConfig
from actors.broker.tables.clients import ClientChannel, ClientTable
from actors.broker.tables.groups import SubscriptionGroupTable
from actors.broker.tables.locks import LockTable
from actors.broker.tables.offsets import ConsumerOffsetTable
from actors.broker.tables.topics import PERM_RW, TopicConfigTable
from protocol.bodies import (
    PERM_INHERIT,
    ConsumeFromWhere,
    ConsumeType,
    DataVersion,
    MessageModel,
    MessageQueue,
    SubscriptionData,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from protocol.codes import LanguageCode
from protocol.names import AUTO_CREATE_TOPIC_KEY_TOPIC, BROKER_SYSTEM_GROUPS, SELF_TEST_TOPIC

# -- topics ---------------------------------------------------------------------------------


def topics(**settings: object) -> TopicConfigTable:
    return TopicConfigTable(BrokerConfig(**settings), now_ms=1_000)  # type: ignore[arg-type]


def test_system_topics_and_the_first_data_version() -> None:
    table = topics(broker_name="broker-a", broker_cluster_name="DefaultCluster")
    for name in (SELF_TEST_TOPIC, AUTO_CREATE_TOPIC_KEY_TOPIC, "broker-a", "DefaultCluster"):
        assert table.select(name) is not None
        assert name in table.system_topics
    assert table.data_version == DataVersion(timestamp=1_000, counter=0)
    assert table.version == 0
    assert topics(auto_create_topic_enable=False).select(AUTO_CREATE_TOPIC_KEY_TOPIC) is None


def test_a_send_creates_a_topic_from_its_template() -> None:
    table = topics(default_topic_queue_nums=8)
    template = table.select(AUTO_CREATE_TOPIC_KEY_TOPIC)
    assert template is not None and template.perm & PERM_INHERIT
    # What the send path checks inline is what the actor then creates.
    expected = table.topic_from_template("New", AUTO_CREATE_TOPIC_KEY_TOPIC, 16)
    created = table.create_topic_in_send_message_method(
        "New", AUTO_CREATE_TOPIC_KEY_TOPIC, 16, 0, now_ms=2_000
    )
    assert created == expected
    assert created is not None
    assert (created.read_queue_nums, created.write_queue_nums) == (8, 8)  # capped by template
    assert created.perm == PERM_RW  # the inherit bit is not inherited
    assert table.data_version == DataVersion(timestamp=2_000, counter=1)
    # A second send finds it: nothing changes.
    again = table.create_topic_in_send_message_method(
        "New", AUTO_CREATE_TOPIC_KEY_TOPIC, 1, 0, now_ms=3_000
    )
    assert again is created
    assert table.data_version.counter == 1


def test_no_topic_from_a_template_that_does_not_allow_it() -> None:
    table = topics()
    assert table.topic_from_template("New", "NoSuchTemplate", 4) is None
    assert table.topic_from_template("New", SELF_TEST_TOPIC, 4) is None  # no inherit bit
    table.config.auto_create_topic_enable = False  # changed at runtime (UPDATE_BROKER_CONFIG)
    assert table.topic_from_template("New", AUTO_CREATE_TOPIC_KEY_TOPIC, 4) is None
    assert (
        table.create_topic_in_send_message_method("New", AUTO_CREATE_TOPIC_KEY_TOPIC, 4, 0, 5)
        is None
    )
    assert table.select("New") is None and table.version == 0


def test_send_back_topics_keep_an_existing_topic() -> None:
    table = topics()
    table.update_topic_config(TopicConfig(topic_name="%RETRY%G", read_queue_nums=3), now_ms=2)
    kept = table.create_topic_in_send_back("%RETRY%G", 1, PERM_RW, 0, now_ms=3)
    assert kept.read_queue_nums == 3
    created = table.create_topic_in_send_back("%DLQ%G", 1, PERM_RW, 0, now_ms=4)
    assert (created.write_queue_nums, created.perm) == (1, PERM_RW)
    assert table.data_version == DataVersion(timestamp=4, counter=2)


def test_delete_order_bump_and_replace() -> None:
    table = topics()
    table.update_topic_config(TopicConfig(topic_name="T"), now_ms=2)
    assert table.delete_topic_config("T", now_ms=3) and not table.delete_topic_config("T", 4)
    assert table.data_version.counter == 2
    table.update_topic_config(TopicConfig(topic_name="O"), now_ms=5)
    version = table.data_version
    # Order flags change the table (and its file) but not its data version.
    assert table.update_order_topics({"O"})
    assert not table.update_order_topics(["O"])
    cfg = table.select("O")
    assert cfg is not None and cfg.order and table.data_version == version
    table.bump_data_version(now_ms=6)
    assert table.data_version == DataVersion(timestamp=6, counter=version.counter + 1)
    # A slave takes its master's table only when the data version differs.
    master = TopicConfigSerializeWrapper(
        topic_config_table={"M": TopicConfig(topic_name="M")},
        data_version=DataVersion(timestamp=9, counter=7),
    )
    assert table.replace(master)
    assert set(table.topic_config_table) == {"M"} and table.data_version == master.data_version
    before = table.version
    assert not table.replace(master) and table.version == before


def test_topics_file_round_trip_over_the_system_topics() -> None:
    table = topics()
    table.update_topic_config(TopicConfig(topic_name="T", read_queue_nums=2), now_ms=7)
    data = table.to_json()
    loaded = topics()
    loaded.from_json(data)
    assert loaded.select("T") == table.select("T")
    assert loaded.data_version == table.data_version
    assert loaded.to_json() == data


# -- consumer offsets -----------------------------------------------------------------------


def test_offsets_commit_rules() -> None:
    table = ConsumerOffsetTable()
    assert table.query_offset("G", "T", 0) == -1
    assert table.commit_offset("G", "T", 0, 5)
    assert not table.commit_offset("G", "T", 0, 5)  # unchanged: no write needed
    assert not table.commit_offset("G", "T", 1, -1)  # negative: ignored, as RocketMQ does
    assert table.version == 1
    assert table.query_offset("G", "T", 0) == 5 and table.query_offset("G", "T", 1) == -1
    table.commit_offset("G", "U", 0, 1)
    table.commit_offset("H", "T", 2, 9)
    assert table.topics_of_group("G") == {"T", "U"}
    assert table.groups_of_topic("T") == {"G", "H"}
    copy = table.queue_offsets("G", "T")
    copy[0] = 99
    assert table.query_offset("G", "T", 0) == 5  # a copy


def test_offsets_clone_remove_and_replace() -> None:
    table = ConsumerOffsetTable()
    table.commit_offset("G", "T", 0, 5)
    table.commit_offset("G", "U", 1, 6)
    table.clone_offsets("G", "Copy", ["T", "Missing"])
    assert table.queue_offsets("Copy", "T") == {0: 5} and table.topics_of_group("Copy") == {"T"}
    version = table.version
    table.remove_group("Nobody")
    assert table.version == version + 1  # the file is written again, as before
    table.remove_group("G")
    assert table.topics_of_group("G") == set()
    table.replace({"X@Y": {0: 1}})
    assert table.offset_table == {"X@Y": {0: 1}}


def test_offsets_file_is_fastjson_with_bare_integer_keys() -> None:
    table = ConsumerOffsetTable()
    table.commit_offset("G", "T", 0, 5)
    data = table.to_json()
    assert b'"T@G":{0:5}' in data
    loaded = ConsumerOffsetTable()
    loaded.from_json(data)
    assert loaded.offset_table == {"T@G": {0: 5}}


# -- subscription groups --------------------------------------------------------------------


def test_groups_auto_create_update_delete_replace() -> None:
    table = SubscriptionGroupTable(now_ms=1)
    assert set(BROKER_SYSTEM_GROUPS) <= set(table.table)
    created = table.auto_create("G", now_ms=2)
    assert created == SubscriptionGroupConfig(group_name="G")
    assert table.auto_create("G", now_ms=3) is created
    assert table.data_version == DataVersion(timestamp=2, counter=1)
    table.update(attrs.evolve(created, retry_max_times=3), now_ms=4)
    found = table.find("G")
    assert found is not None and found.retry_max_times == 3
    assert table.delete("G", now_ms=5) and not table.delete("G", now_ms=6)
    assert table.data_version == DataVersion(timestamp=5, counter=3)
    master = SubscriptionGroupWrapper(
        subscription_group_table={"M": SubscriptionGroupConfig(group_name="M")},
        data_version=DataVersion(timestamp=8, counter=9),
    )
    assert table.replace(master) and set(table.table) == {"M"}
    assert not table.replace(master)
    loaded = SubscriptionGroupTable(now_ms=1)
    loaded.from_json(table.to_json())
    assert loaded.find("M") is not None and loaded.data_version == master.data_version
    assert orjson.loads(table.to_json())["dataVersion"]["counter"] == 9


# -- client connections ---------------------------------------------------------------------


class Conn:
    """Stands in for a remoting connection (the table only hashes it)."""


def channel(conn: Conn, client_id: str, now: float = 0.0) -> ClientChannel:
    return ClientChannel(conn, client_id, LanguageCode.JAVA, 400, now)  # type: ignore[arg-type]


def register(
    table: ClientTable,
    group: str,
    chan: ClientChannel,
    subscriptions: list[SubscriptionData],
    notify: bool = True,
) -> bool:
    return table.register_consumer(
        group, chan, ConsumeType.CONSUME_PASSIVELY, MessageModel.CLUSTERING,
        ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, subscriptions, notify,
    )  # fmt: skip


def test_membership_changes_name_the_groups_to_tell() -> None:
    table = ClientTable()
    a, b = Conn(), Conn()
    sub = SubscriptionData(topic="T", sub_string="*", sub_version=1)
    assert register(table, "G", channel(a, "c1"), [sub])
    assert [group for group, _ in table.take_changed_groups()] == ["G"]
    assert table.take_changed_groups() == []  # drained
    # The same heartbeat again changes nothing; a second member changes the group.
    assert not register(table, "G", channel(a, "c1", 30.0), [sub])
    assert register(table, "G", channel(b, "c2"), [sub])
    [(group, told)] = table.take_changed_groups()
    assert group == "G" and set(told) == {a, b}  # type: ignore[comparison-overlap]
    info = table.get_consumer_group_info("G")
    assert info is not None and info.channels[a].last_update == 30.0  # type: ignore[index]
    # A heartbeat with notify off changes the group without telling anyone.
    other = SubscriptionData(topic="U", sub_string="TagA", sub_version=1)
    assert register(table, "G", channel(a, "c1"), [other], notify=False)
    assert table.take_changed_groups() == []
    assert set(info.subscriptions) == {"U"}  # T is no longer subscribed


def test_older_subscription_versions_do_not_replace_newer() -> None:
    table = ClientTable()
    conn = Conn()
    register(table, "G", channel(conn, "c1"), [SubscriptionData(topic="T", sub_version=5)])
    register(table, "G", channel(conn, "c1"), [SubscriptionData(topic="T", sub_version=4)])
    info = table.get_consumer_group_info("G")
    assert info is not None and info.subscriptions["T"].sub_version == 5


def test_leaving_members_and_closed_connections() -> None:
    table = ClientTable()
    a, b = Conn(), Conn()
    register(table, "G", channel(a, "c1"), [])
    register(table, "G", channel(b, "c2"), [])
    register(table, "H", channel(a, "c1"), [])
    table.register_producer("P", channel(a, "c1"))
    table.take_changed_groups()
    # a closes: G keeps b (told), H has nobody left (dropped, nobody to tell), P goes.
    table.connection_closed(a)  # type: ignore[arg-type]
    assert [group for group, _ in table.take_changed_groups()] == ["G"]
    assert set(table.consumer_table) == {"G"} and table.producer_table == {}
    assert table.unregister_consumer("G", b)  # type: ignore[arg-type]
    assert not table.unregister_consumer("G", b)  # type: ignore[arg-type]
    assert table.consumer_table == {} and table.take_changed_groups() == []


def test_silent_channels_expire() -> None:
    table = ClientTable(channel_expired=120.0)
    conn = Conn()
    register(table, "G", channel(conn, "c1", 0.0), [])
    table.register_producer("P", channel(conn, "c1", 0.0))
    assert table.scan_not_active(120.0) == 0
    assert table.scan_not_active(120.5) == 2
    assert table.consumer_table == {} and table.producer_table == {}


# -- orderly locks --------------------------------------------------------------------------


def test_locks_grant_renew_and_lease() -> None:
    mqs = [MessageQueue(topic="T", broker_name="b", queue_id=i) for i in range(3)]
    table = LockTable(lock_max_live_time=60.0)
    assert table.try_lock_batch("G", mqs[:2], "A", now=0.0) == mqs[:2]
    assert table.try_lock_batch("G", mqs, "B", now=10.0) == mqs[2:]  # in request order
    assert table.try_lock_batch("G", mqs[:1], "A", now=50.0) == mqs[:1]  # renewed
    assert table.locked_by("G", mqs[1], now=60.0) == "A"
    assert table.locked_by("G", mqs[1], now=60.5) is None  # lease over, entry kept
    assert table.statistics().locked_queues == 3
    assert table.try_lock_batch("G", mqs[1:2], "B", now=61.0) == mqs[1:2]
    assert table.unlock_batch("G", mqs, "B") == 2
    assert table.is_locked("G", mqs[0], "A", now=61.0)
    assert table.unlock_batch("Other", mqs, "A") == 0
    assert table.unlock_batch("G", mqs, "A") == 1
    assert table.mq_lock_table == {}
