"""JSON bodies: Java, C++ and Go input forms, the exact output forms, and round trips."""

from __future__ import annotations

import re
import struct
import zlib
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import fastjson
from protocol.bodies import (
    PERM_INHERIT,
    PERM_PRIORITY,
    PERM_READ,
    PERM_WRITE,
    BodyError,
    BrokerData,
    BrokerStatsData,
    BrokerStatsItem,
    ClusterInfo,
    Connection,
    ConsumeFromWhere,
    ConsumerConnection,
    ConsumerData,
    ConsumerOffsetSerializeWrapper,
    ConsumeStats,
    ConsumeType,
    DataVersion,
    DelayOffsetSerializeWrapper,
    GetConsumerListByGroupResponseBody,
    GroupList,
    HeartbeatData,
    KVConfigSerializeWrapper,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageModel,
    MessageQueue,
    OffsetWrapper,
    ProducerConnection,
    ProducerData,
    QueryConsumeTimeSpanBody,
    QueueData,
    QueueTimeSpan,
    RegisterBrokerBody,
    ResetOffsetBody,
    SubscriptionData,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicFilterType,
    TopicList,
    TopicOffset,
    TopicRouteData,
    TopicStatsTable,
    UnlockBatchRequestBody,
    perm_to_string,
)
from protocol.codes import LanguageCode

MQ0 = MessageQueue(topic="T", broker_name="broker-a", queue_id=0)
MQ1 = MessageQueue(topic="T", broker_name="broker-a", queue_id=1)

# Heartbeat bodies as the C++ client 2.x and the Node client ali-ons sent them (sheet 11).
CPP_HEARTBEAT = (
    b'{"clientID":"14043-127.0.0.1@DEFAULT","consumerDataSet":[{"consumeFromWhere":0,'
    b'"consumeType":1,"groupName":"ProbeCG","messageModel":1,"subscriptionDataSet":['
    b'{"subString":"*","subVersion":"1795346750287","topic":"%RETRY%ProbeCG"},'
    b'{"codeSet":[0],"subString":"TagA","subVersion":"1795346750287","tagsSet":["TagA"],'
    b'"topic":"ProbeTopic"}]}]}\n'
)
ALI_ONS_HEARTBEAT = (
    b'{"clientID":"192.0.2.2@16034","consumerDataSet":[{"groupName":"ProbeJSCG",'
    b'"consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING",'
    b'"consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{"topic":'
    b'"ProbeTopicJS","subString":"TagA","classFilterMode":false,"tagsSet":["TagA"],'
    b'"codeSet":[2598919],"subVersion":1795346827973}],"unitMode":false}],"producerDataSet":[]}'
)
# What the Go client sends, written from the sheet (4.5): names, its own key order, a producer.
GO_HEARTBEAT = (
    b'{"clientID":"10.0.0.5@4242","producerDataSet":[{"groupName":"pg"}],'
    b'"consumerDataSet":[{"groupName":"cg","consumeType":"CONSUME_ACTIVELY",'
    b'"messageModel":"BROADCASTING","consumeFromWhere":"CONSUME_FROM_TIMESTAMP",'
    b'"subscriptionDataSet":[{"classFilterMode":false,"topic":"T","subString":"a || b",'
    b'"tagsSet":["a","b"],"codeSet":[97,98],"subVersion":1700000000000,'
    b'"expressionType":"TAG"}],"unitMode":true}]}'
)
CPP_LOCK = (
    b'{"clientId":"18588-127.0.0.1@DEFAULT","consumerGroup":"OCG","mqSet":[{"brokerName":'
    b'"broker-a","queueId":0,"topic":"%RETRY%OCG"}]}\n'
)
# Route data as a Java 4.9 registry writes it for an old client: bare broker-id keys and the
# pre-4.9 spelling topicSynFlag.
JAVA_ROUTE = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},'
    b'"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},'
    b'"orderTopicConf":"broker-a:4","queueDatas":[{"brokerName":"broker-a","perm":6,'
    b'"readQueueNums":4,"topicSynFlag":2,"writeQueueNums":4}]}'
)


# -- heartbeat forms ----------------------------------------------------------------------------


def test_cpp_heartbeat_ordinals_string_subversion_missing_sets() -> None:
    heartbeat = HeartbeatData.from_json(CPP_HEARTBEAT)
    assert heartbeat.client_id == "14043-127.0.0.1@DEFAULT"
    assert heartbeat.producer_data_set == []
    (consumer,) = heartbeat.consumer_data_set
    assert consumer.consume_type is ConsumeType.CONSUME_PASSIVELY
    assert consumer.message_model is MessageModel.CLUSTERING
    assert consumer.consume_from_where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    assert consumer.unit_mode is False
    retry, topic = consumer.subscription_data_set
    assert retry == SubscriptionData(
        topic="%RETRY%ProbeCG", sub_string="*", sub_version=1795346750287
    )
    assert (retry.tags_set, retry.code_set, retry.expression_type) == ([], [], "TAG")
    assert (topic.tags_set, topic.code_set) == (["TagA"], [0])
    # Emitted with enum names, every set present.
    doc = orjson.loads(heartbeat.to_json())
    assert doc["consumerDataSet"][0]["consumeType"] == "CONSUME_PASSIVELY"
    assert doc["consumerDataSet"][0]["messageModel"] == "CLUSTERING"
    assert doc["consumerDataSet"][0]["consumeFromWhere"] == "CONSUME_FROM_LAST_OFFSET"
    assert doc["producerDataSet"] == []
    assert doc["consumerDataSet"][0]["subscriptionDataSet"][0]["subVersion"] == 1795346750287


def test_ali_ons_heartbeat() -> None:
    heartbeat = HeartbeatData.from_json(ALI_ONS_HEARTBEAT)
    (consumer,) = heartbeat.consumer_data_set
    assert consumer.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    assert consumer.subscription_data_set[0].code_set == [2598919]


def test_go_heartbeat() -> None:
    heartbeat = HeartbeatData.from_json(GO_HEARTBEAT)
    assert heartbeat.producer_data_set == [ProducerData(group_name="pg")]
    (consumer,) = heartbeat.consumer_data_set
    assert consumer.consume_type is ConsumeType.CONSUME_ACTIVELY
    assert consumer.message_model is MessageModel.BROADCASTING
    assert consumer.consume_from_where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP
    assert consumer.unit_mode is True
    assert consumer.subscription_data_set[0].tags_set == ["a", "b"]


def test_heartbeat_enum_case_and_errors() -> None:
    body = b'{"clientID":"c","consumerDataSet":[{"groupName":"g","messageModel":"clustering"}]}'
    assert HeartbeatData.from_json(body).consumer_data_set[0].message_model is (
        MessageModel.CLUSTERING
    )
    with pytest.raises(BodyError, match=r"HeartbeatData.*consume_type"):
        HeartbeatData.from_json(
            b'{"clientID":"c","consumerDataSet":[{"groupName":"g","consumeType":7}]}'
        )
    with pytest.raises(BodyError, match=r"HeartbeatData.*client_id"):
        HeartbeatData.from_json(b'{"consumerDataSet":[]}')
    with pytest.raises(BodyError, match="not a JSON object"):
        HeartbeatData.from_json(b"[1]")
    with pytest.raises(BodyError, match="not JSON"):
        HeartbeatData.from_json(b'{"clientID":')


# -- route data ---------------------------------------------------------------------------------


def test_java_route_with_bare_keys_and_old_flag_spelling() -> None:
    route = TopicRouteData.from_json(JAVA_ROUTE)
    assert route.broker_datas == [
        BrokerData(
            cluster="DefaultCluster",
            broker_name="broker-a",
            broker_addrs={0: "10.0.0.1:10911", 1: "10.0.0.2:10911"},
        )
    ]
    assert route.queue_datas[0].topic_sys_flag == 2
    assert route.order_topic_conf == "broker-a:4"


def test_route_json_is_compact_standard_and_carries_both_flag_keys() -> None:
    route = TopicRouteData.from_json(JAVA_ROUTE)
    text = route.to_json()
    assert text == (
        b'{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"},'
        b'"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},'
        b'"orderTopicConf":"broker-a:4","queueDatas":[{"brokerName":"broker-a","perm":6,'
        b'"readQueueNums":4,"topicSynFlag":2,"topicSysFlag":2,"writeQueueNums":4}]}'
    )
    assert b" " not in text
    orjson.loads(text)  # standard JSON
    without_conf = TopicRouteData(queue_datas=route.queue_datas, broker_datas=route.broker_datas)
    assert b"orderTopicConf" not in without_conf.to_json()


def go_broker_addrs(route_json: bytes) -> dict[int, str]:
    """The Go client's way of reading brokerAddrs: split the raw text, no JSON parser."""
    text = route_json.decode()
    start = text.index('"brokerAddrs":') + len('"brokerAddrs":')
    raw = text[start : text.index("}", start) + 1].strip("{}")
    addrs = {}
    for piece in raw.split(","):
        key, _, value = piece.partition(":")
        addrs[int(key.replace('"', ""), 10)] = value.replace('"', "")
    return addrs


def test_route_json_survives_the_go_client_parser() -> None:
    route = TopicRouteData(
        broker_datas=[BrokerData(cluster="c", broker_name="b", broker_addrs={0: "h:1", 2: "h:2"})],
        queue_datas=[QueueData(broker_name="b", read_queue_nums=8, write_queue_nums=8)],
    )
    assert go_broker_addrs(route.to_json()) == {0: "h:1", 2: "h:2"}


def test_cluster_info_quoted_keys() -> None:
    info = ClusterInfo(
        broker_addr_table={
            "broker-a": BrokerData(cluster="C", broker_name="broker-a", broker_addrs={0: "h:1"})
        },
        cluster_addr_table={"C": ["broker-a"]},
    )
    assert info.to_json() == (
        b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{"0":"h:1"},"brokerName":"broker-a",'
        b'"cluster":"C"}},"clusterAddrTable":{"C":["broker-a"]}}'
    )
    java_form = (
        b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"h:1"},"brokerName":"broker-a",'
        b'"cluster":"C"}},"clusterAddrTable":{"C":["broker-a"]}}'
    )
    assert ClusterInfo.from_json(java_form) == info


# -- config files and MessageQueue-keyed maps ---------------------------------------------------


def test_consumer_offset_file_form() -> None:
    text = b'{"offsetTable":{"t@g":{0:12,1:7}}}'
    wrapper = ConsumerOffsetSerializeWrapper.from_json(text)
    assert wrapper.offset_table == {"t@g": {0: 12, 1: 7}}
    assert wrapper.to_json() == text
    # A standard-JSON rendering (quoted keys) reads the same.
    assert ConsumerOffsetSerializeWrapper.from_json(b'{"offsetTable":{"t@g":{"0":12,"1":7}}}') == (
        wrapper
    )


def test_delay_offset_file_form() -> None:
    text = b'{"offsetTable":{1:0,2:15,18:3}}'
    wrapper = DelayOffsetSerializeWrapper.from_json(text)
    assert wrapper.offset_table == {1: 0, 2: 15, 18: 3}
    assert wrapper.to_json() == text


def test_consume_stats_object_keys() -> None:
    text = (
        b'{"consumeTps":1.5,"offsetTable":{'
        b'{"brokerName":"broker-a","queueId":0,"topic":"T"}:'
        b'{"brokerOffset":9,"consumerOffset":3,"lastTimestamp":1700000000000},'
        b'{"brokerName":"broker-a","queueId":1,"topic":"T"}:'
        b'{"brokerOffset":4,"consumerOffset":4,"lastTimestamp":0}}}'
    )
    stats = ConsumeStats.from_json(text)
    assert stats.offset_table[MQ0] == OffsetWrapper(
        broker_offset=9, consumer_offset=3, last_timestamp=1700000000000
    )
    assert stats.offset_table[MQ1].consumer_offset == 4
    assert stats.consume_tps == 1.5
    assert stats.to_json() == text


def test_topic_stats_and_reset_offset_object_keys() -> None:
    table = TopicStatsTable(
        offset_table={MQ1: TopicOffset(min_offset=0, max_offset=5, last_update_timestamp=7)}
    )
    assert table.to_json() == (
        b'{"offsetTable":{{"brokerName":"broker-a","queueId":1,"topic":"T"}:'
        b'{"lastUpdateTimestamp":7,"maxOffset":5,"minOffset":0}}}'
    )
    assert TopicStatsTable.from_json(table.to_json()) == table
    reset = ResetOffsetBody(offset_table={MQ0: 12, MQ1: 30})
    assert reset.to_json() == (
        b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:12,'
        b'{"brokerName":"broker-a","queueId":1,"topic":"T"}:30}}'
    )
    assert ResetOffsetBody.from_json(reset.to_json()) == reset
    # A key given as JSON text in a string reads the same.
    quoted = orjson.dumps({"offsetTable": {orjson.dumps(MQ0.to_obj()).decode(): 12}})
    assert ResetOffsetBody.from_json(quoted).offset_table == {MQ0: 12}


def test_subscription_group_defaults() -> None:
    config = SubscriptionGroupConfig(group_name="g")
    assert orjson.loads(config.to_json()) == {
        "brokerId": 0,
        "consumeBroadcastEnable": True,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "groupName": "g",
        "notifyConsumerIdsChangedEnable": True,
        "retryMaxTimes": 16,
        "retryQueueNums": 1,
        "whichBrokerWhenConsumeSlowly": 1,
    }
    assert SubscriptionGroupConfig.from_json(b'{"groupName":"g","groupSysFlag":0}') == config


def test_topic_config_json() -> None:
    config = TopicConfig(topic_name="T", read_queue_nums=4, write_queue_nums=4)
    assert config.to_json() == (
        b'{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG",'
        b'"topicName":"T","topicSysFlag":0,"writeQueueNums":4}'
    )
    assert TopicConfig.from_json(b'{"topicName":"T","topicFilterType":1}').topic_filter_type is (
        TopicFilterType.MULTI_TAG
    )


# -- registration body --------------------------------------------------------------------------


def register_body() -> RegisterBrokerBody:
    table = {
        "T": TopicConfig(topic_name="T", read_queue_nums=4, write_queue_nums=4),
        "TBW102": TopicConfig(topic_name="TBW102", read_queue_nums=8, write_queue_nums=8, perm=7),
    }
    wrapper = TopicConfigSerializeWrapper(
        topic_config_table=table, data_version=DataVersion(timestamp=1700000000000, counter=5)
    )
    return RegisterBrokerBody(topic_config_serialize_wrapper=wrapper, filter_server_list=[])


def test_register_body_plain() -> None:
    body = register_body()
    assert RegisterBrokerBody.decode(body.encode()) == body
    doc = orjson.loads(body.encode())
    assert doc["topicConfigSerializeWrapper"]["dataVersion"] == {
        "counter": 5,
        "timestamp": 1700000000000,
    }


def framed(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def test_register_body_compressed_from_the_sheet_layout() -> None:
    raw = (
        framed(b'{"counter":5,"timestamp":1700000000000}')
        + struct.pack(">i", 2)
        + framed(b"T 4 4 6 SINGLE_TAG")
        + framed(b"TBW102 8 8 7 SINGLE_TAG {}")  # a 5.x-style trailing field is ignored
        + framed(b'["10.0.0.9:9999"]')
    )
    body = RegisterBrokerBody.decode(zlib.compress(raw, 9), compressed=True)
    assert body.topic_config_serialize_wrapper == register_body().topic_config_serialize_wrapper
    assert body.filter_server_list == ["10.0.0.9:9999"]


def test_register_body_compressed_round_trip_drops_sys_flag_and_order() -> None:
    original = register_body()
    table = dict(original.topic_config_serialize_wrapper.topic_config_table)
    table["O"] = TopicConfig(topic_name="O", topic_sys_flag=1, order=True)
    body = RegisterBrokerBody(
        topic_config_serialize_wrapper=TopicConfigSerializeWrapper(
            topic_config_table=table,
            data_version=original.topic_config_serialize_wrapper.data_version,
        ),
        filter_server_list=["f:1"],
    )
    encoded = body.encode(compressed=True)
    assert zlib.decompress(encoded)[4:5] == b"{"
    again = RegisterBrokerBody.decode(encoded, compressed=True)
    assert again.topic_config_serialize_wrapper.topic_config_table["O"] == TopicConfig(
        topic_name="O"
    )
    assert again.topic_config_serialize_wrapper.topic_config_table["T"] == table["T"]
    assert again.filter_server_list == ["f:1"]


@pytest.mark.parametrize(
    "data",
    [
        b"not zlib",
        zlib.compress(b"\x00\x00\x00\x05{}"),
        zlib.compress(framed(b'{"counter":1}') + struct.pack(">i", 1) + framed(b"T 1 1")),
        zlib.compress(framed(b'{"counter":1}') + struct.pack(">i", 1) + framed(b"T 1 1 6 NOPE")),
    ],
)
def test_register_body_compressed_garbage(data: bytes) -> None:
    with pytest.raises(BodyError, match="compressed RegisterBrokerBody"):
        RegisterBrokerBody.decode(data, compressed=True)


# -- everything else: shapes and round trips -------------------------------------------------


def test_lock_bodies() -> None:
    request = LockBatchRequestBody.from_json(CPP_LOCK)
    assert request.mq_set == [MessageQueue(topic="%RETRY%OCG", broker_name="broker-a", queue_id=0)]
    assert request.client_id == "18588-127.0.0.1@DEFAULT"
    answer = LockBatchResponseBody(lock_ok_mq_set=[MQ0])
    assert answer.to_json() == (
        b'{"lockOKMQSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"}]}'
    )


def test_small_bodies_shapes() -> None:
    assert TopicList(topic_list=["a"]).to_json() == b'{"topicList":["a"]}'
    assert TopicList(topic_list=[], broker_addr="h:1").to_json() == (
        b'{"brokerAddr":"h:1","topicList":[]}'
    )
    assert KVTable(table={"k": "v"}).to_json() == b'{"table":{"k":"v"}}'
    assert GroupList(group_list=["g"]).to_json() == b'{"groupList":["g"]}'
    assert GetConsumerListByGroupResponseBody(consumer_id_list=["c"]).to_json() == (
        b'{"consumerIdList":["c"]}'
    )
    assert KVConfigSerializeWrapper(
        config_table={"ORDER_TOPIC_CONFIG": {"T": "b:4"}}
    ).to_json() == (b'{"configTable":{"ORDER_TOPIC_CONFIG":{"T":"b:4"}}}')
    assert Connection(
        client_id="c", client_addr="a:1", language=LanguageCode.CPP, version=63
    ).to_json() == (b'{"clientAddr":"a:1","clientId":"c","language":"CPP","version":63}')
    assert Connection.from_json(b'{"language":9}').language is LanguageCode.GO


def test_time_span_strings_are_written_and_ignored_on_read() -> None:
    body = QueryConsumeTimeSpanBody(
        consume_time_span_set=[QueueTimeSpan(message_queue=MQ0, min_time_stamp=1700000000123)]
    )
    doc = orjson.loads(body.to_json())["consumeTimeSpanSet"][0]
    assert doc["minTimeStampStr"].endswith(",123")
    assert set(doc) >= {"maxTimeStampStr", "consumeTimeStampStr", "delayTime", "messageQueue"}
    assert QueryConsumeTimeSpanBody.from_json(body.to_json()) == body


def test_perm_constants() -> None:
    assert (PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT) == (8, 4, 2, 1)
    assert perm_to_string(6) == "RW-"
    assert perm_to_string(7) == "RWX"
    assert perm_to_string(PERM_READ) == "R--"


SAMPLES: list[Any] = [
    MQ0,
    QueueData(broker_name="b", read_queue_nums=4, write_queue_nums=4, perm=6, topic_sys_flag=1),
    TopicRouteData.from_json(JAVA_ROUTE),
    ClusterInfo(cluster_addr_table={"C": ["a", "b"]}),
    TopicList(topic_list=["x", "y"], broker_addr="h:1"),
    KVTable(table={"a": "1"}),
    GroupList(group_list=["g1", "g2"]),
    GetConsumerListByGroupResponseBody(consumer_id_list=["c1"]),
    register_body(),
    register_body().topic_config_serialize_wrapper,
    DataVersion(timestamp=1, counter=2),
    HeartbeatData.from_json(GO_HEARTBEAT),
    HeartbeatData.from_json(CPP_HEARTBEAT),
    LockBatchRequestBody(consumer_group="g", client_id="c", mq_set=[MQ0, MQ1]),
    UnlockBatchRequestBody(consumer_group="g", client_id="c", only_this_broker=True, mq_set=[MQ1]),
    LockBatchResponseBody(lock_ok_mq_set=[MQ1]),
    ConsumerConnection(
        connection_set=[Connection(client_id="c", client_addr="a", version=409)],
        subscription_table={"T": SubscriptionData(topic="T", tags_set=["a"], code_set=[97])},
        consume_type=ConsumeType.CONSUME_ACTIVELY,
        message_model=MessageModel.BROADCASTING,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_MAX_OFFSET,
    ),
    ProducerConnection(connection_set=[Connection(client_id="p", language=LanguageCode.GO)]),
    SubscriptionGroupConfig(group_name="g", retry_max_times=3, consume_enable=False),
    SubscriptionGroupWrapper(
        subscription_group_table={"g": SubscriptionGroupConfig(group_name="g")},
        data_version=DataVersion(timestamp=3, counter=1),
    ),
    ConsumerOffsetSerializeWrapper(offset_table={"T@g": {0: 1, 3: 9}, "%RETRY%g@g": {0: 0}}),
    DelayOffsetSerializeWrapper(offset_table={3: 100}),
    ConsumeStats(offset_table={MQ0: OffsetWrapper(broker_offset=1)}, consume_tps=0.25),
    TopicStatsTable(offset_table={MQ0: TopicOffset(max_offset=3), MQ1: TopicOffset()}),
    ResetOffsetBody(offset_table={MQ1: 99}),
    BrokerStatsData(stats_minute=BrokerStatsItem(sum=10, tps=1.5, avgpt=0.1)),
    QueryConsumeTimeSpanBody(
        consume_time_span_set=[QueueTimeSpan(message_queue=MQ1, delay_time=5)]
    ),
    KVConfigSerializeWrapper(config_table={"ns": {"k": "v"}}),
    ConsumerData(group_name="g"),
    TopicConfig(topic_name="T", order=True),
]


@pytest.mark.parametrize("body", SAMPLES, ids=lambda body: type(body).__name__)
def test_round_trip(body: Any) -> None:
    text = body.to_json()
    assert type(body).from_json(text) == body
    outside_strings = re.sub(rb'"(?:[^"\\]|\\.)*"', b'""', text)
    assert not re.search(rb"\s", outside_strings), "compact JSON has no whitespace"
    fastjson.loads(text)


NAMES = st.text(st.characters(codec="utf-8"), min_size=1, max_size=10)
LONGS = st.integers(min_value=-(2**63), max_value=2**63 - 1)
QUEUES = st.builds(MessageQueue, topic=NAMES, broker_name=NAMES, queue_id=st.integers(0, 1023))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.builds(
            BrokerData,
            cluster=NAMES,
            broker_name=NAMES,
            broker_addrs=st.dictionaries(st.integers(0, 16), NAMES, max_size=3),
        ),
        max_size=3,
    ),
    st.lists(st.builds(QueueData, broker_name=NAMES, perm=st.integers(0, 15)), max_size=3),
    st.none() | NAMES,
)
def test_route_round_trip(
    brokers: list[BrokerData], queues: list[QueueData], conf: str | None
) -> None:
    route = TopicRouteData(order_topic_conf=conf, broker_datas=brokers, queue_datas=queues)
    assert TopicRouteData.from_json(route.to_json()) == route


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(QUEUES, st.builds(OffsetWrapper, broker_offset=LONGS), max_size=5))
def test_consume_stats_round_trip(table: dict[MessageQueue, OffsetWrapper]) -> None:
    stats = ConsumeStats(offset_table=table)
    assert ConsumeStats.from_json(stats.to_json()) == stats


@settings(max_examples=200, deadline=None)
@given(
    st.builds(
        HeartbeatData,
        client_id=NAMES,
        producer_data_set=st.lists(st.builds(ProducerData, group_name=NAMES), max_size=2),
        consumer_data_set=st.lists(
            st.builds(
                ConsumerData,
                group_name=NAMES,
                consume_type=st.sampled_from(ConsumeType),
                message_model=st.sampled_from(MessageModel),
                consume_from_where=st.sampled_from(ConsumeFromWhere),
                subscription_data_set=st.lists(
                    st.builds(
                        SubscriptionData,
                        topic=NAMES,
                        tags_set=st.lists(NAMES, max_size=2),
                        code_set=st.lists(st.integers(-(2**31), 2**31 - 1), max_size=2),
                        sub_version=LONGS,
                    ),
                    max_size=2,
                ),
                unit_mode=st.booleans(),
            ),
            max_size=2,
        ),
    )
)
def test_heartbeat_round_trip(heartbeat: HeartbeatData) -> None:
    assert HeartbeatData.from_json(heartbeat.to_json()) == heartbeat
