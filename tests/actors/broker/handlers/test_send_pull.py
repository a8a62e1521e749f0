"""Send and pull through a live broker: byte-exact records, batches, and every check's code."""

from __future__ import annotations

from boltmq import EmbeddedCluster
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.headers import CreateTopicRequestHeader, encode_header
from protocol.message import (
    BatchElement,
    MessageSysFlag,
    decode_offset_msg_id,
    encode_batch,
    iter_records,
)
from tests.actors.broker.helpers import call, pull_request, send_request

NO_BODY_HEADER = dict(
    zip("abcdefgh", ["PG", "Small", "TBW102", "4", "0", "0", "0", "0"], strict=True)
)


async def create_topic(
    client: RemotingClient, cluster: EmbeddedCluster, topic: str, queues: int = 4, perm: int = 6
) -> None:
    header = CreateTopicRequestHeader(
        topic=topic, default_topic="TBW102", read_queue_nums=queues, write_queue_nums=queues,
        perm=perm, topic_filter_type="SINGLE_TAG", order=False,
    )  # fmt: skip
    request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, encode_header(header))
    answer = await call(client, cluster.broker_address, request)
    assert answer.code == ResponseCode.SUCCESS, answer.remark


async def test_send_v1_and_v2_then_pull_byte_exact(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    broker = cluster.broker_address
    props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "AC11000100002A9F0000000000000001"}
    first = await call(client, broker, send_request("Orders", b"one", properties=props, v2=False))
    second = await call(client, broker, send_request("Orders", b"two", properties={"TAGS": "TagB"}))
    for answer in (first, second):
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert answer.ext_fields is not None
        assert {"msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"} <= set(
            answer.ext_fields
        )
    assert first.ext_fields and second.ext_fields
    assert (first.ext_fields["queueOffset"], second.ext_fields["queueOffset"]) == ("0", "1")

    pulled = await call(client, broker, pull_request("Orders"))
    assert pulled.code == ResponseCode.SUCCESS and pulled.remark == "FOUND"
    assert pulled.ext_fields is not None
    assert pulled.ext_fields["nextBeginOffset"] == "2"
    assert pulled.ext_fields["maxOffset"] == "2"
    assert pulled.ext_fields["suggestWhichBrokerId"] == "0"
    assert pulled.body is not None
    records = list(iter_records(pulled.body))
    assert [r.body for r in records] == [b"one", b"two"]
    assert records[0].properties == {**props, "CLUSTER": "DefaultCluster"}
    assert records[0].flag == 7 and records[0].born_timestamp == 1_700_000_000_000
    assert records[0].born_host[0] == "127.0.0.1"
    assert [r.queue_offset for r in records] == [0, 1]
    # The pull body is the commit log's bytes: each record equals the stored one.
    store = cluster.broker.store
    pos = 0
    for record in records:
        stored = store.look_message_by_offset(record.commit_log_offset)
        assert stored is not None
        assert bytes(stored) == bytes(pulled.body[pos : pos + record.store_size])
        stored.release()
        pos += record.store_size
    # The msgId is the offset id: store host + commit-log offset.
    assert first.ext_fields["msgId"] == records[0].offset_msg_id
    host, offset = decode_offset_msg_id(first.ext_fields["msgId"])
    assert offset == records[0].commit_log_offset and host[1] == cluster.broker.config.listen_port


async def test_batches_by_code_and_by_flag(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    broker = cluster.broker_address
    await create_topic(client, cluster, "Batched", queues=2)
    body = encode_batch(
        BatchElement(flag=i, body=f"b{i}".encode(), properties=f"UNIQ_KEY\x01ID{i}")
        for i in range(5)
    )
    java = await call(
        client,
        broker,
        send_request("Batched", body, code=RequestCode.SEND_BATCH_MESSAGE, batch=True),
    )
    cpp = await call(client, broker, send_request("Batched", body, batch=True))  # 310 + m=true
    for answer, first_offset in ((java, "0"), (cpp, "5")):
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert answer.ext_fields is not None
        assert answer.ext_fields["queueOffset"] == first_offset
        assert len(answer.ext_fields["msgId"].split(",")) == 5
    pulled = await call(client, broker, pull_request("Batched"))
    assert pulled.body is not None
    records = list(iter_records(pulled.body))
    assert [r.body for r in records] == [f"b{i}".encode() for i in range(5)] * 2
    assert [r.flag for r in records[:5]] == list(range(5))
    assert [r.queue_offset for r in records] == list(range(10))
    assert records[3].properties["UNIQ_KEY"] == "ID3"
    assert records[3].properties["CLUSTER"] == "DefaultCluster"


async def test_compressed_body_is_stored_as_sent(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    import zlib

    body = zlib.compress(b"x" * 10_000, 5)
    answer = await call(
        client, cluster.broker_address,
        send_request("Zipped", body, sys_flag=MessageSysFlag.COMPRESSED),
    )  # fmt: skip
    assert answer.code == ResponseCode.SUCCESS
    pulled = await call(client, cluster.broker_address, pull_request("Zipped"))
    assert pulled.body is not None
    (record,) = iter_records(pulled.body)
    assert record.body == body and record.decompressed_body() == b"x" * 10_000


async def test_send_checks_answer_their_codes_and_store_nothing(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    broker = cluster.broker_address
    store = cluster.broker.store
    await create_topic(client, cluster, "ReadOnly", perm=4)
    await create_topic(client, cluster, "Small", queues=2)
    bad_batch = b"\x00\x00\x00\x30garbage"
    cases = [
        (send_request("bad topic!"), ResponseCode.SYSTEM_ERROR),
        (send_request("x" * 128), ResponseCode.SYSTEM_ERROR),
        (send_request("SCHEDULE_TOPIC_XXXX"), ResponseCode.NO_PERMISSION),
        (send_request("Missing", default_topic="NoSuchTemplate"), ResponseCode.TOPIC_NOT_EXIST),
        (send_request("ReadOnly"), ResponseCode.NO_PERMISSION),
        (send_request("Small", queue_id=2), ResponseCode.SYSTEM_ERROR),
        (send_request("Small", b"x" * (4 * 1024 * 1024 + 1)), ResponseCode.MESSAGE_ILLEGAL),
        (send_request("Small", bad_batch, batch=True), ResponseCode.MESSAGE_ILLEGAL),
        (
            RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "Small"}, b"x"),
            ResponseCode.SYSTEM_ERROR,
        ),
        (
            RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, NO_BODY_HEADER),
            ResponseCode.MESSAGE_ILLEGAL,
        ),
    ]  # fmt: skip
    before = store.get_max_phy_offset()
    for request, code in cases:
        answer = await call(client, broker, request)
        assert answer.code == code, (request.ext_fields, answer.code, answer.remark)
        assert answer.remark, "every refusal says why"
    assert store.get_max_phy_offset() == before
    assert cluster.broker.topics.select("Missing") is None
    # The connection is still good after every refusal.
    ok = await call(client, broker, send_request("Small"))
    assert ok.code == ResponseCode.SUCCESS


async def test_broker_without_write_permission_refuses(tmp_path: object) -> None:
    import boltmq

    async with boltmq.embedded(broker_permission=4) as cluster, RemotingClient() as client:
        answer = await call(client, cluster.broker_address, send_request("Any"))
        assert answer.code == ResponseCode.NO_PERMISSION
        assert cluster.broker.store.get_max_phy_offset() == 0


async def test_retry_past_max_reconsume_goes_to_dlq(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    broker = cluster.broker_address
    retry = await call(client, broker, send_request("%RETRY%G1", b"again", reconsume_times=3))
    assert retry.code == ResponseCode.SUCCESS
    dead = await call(client, broker, send_request("%RETRY%G1", b"dead", reconsume_times=16))
    assert dead.code == ResponseCode.SUCCESS
    custom = await call(
        client,
        broker,
        send_request("%RETRY%G1", b"dead2", reconsume_times=2, max_reconsume_times=2),
    )
    assert custom.code == ResponseCode.SUCCESS
    in_retry = await call(client, broker, pull_request("%RETRY%G1", group="G1"))
    in_dlq = await call(client, broker, pull_request("%DLQ%G1", group="G1"))
    assert in_retry.body is not None and in_dlq.body is not None
    assert [r.body for r in iter_records(in_retry.body)] == [b"again"]
    assert [r.body for r in iter_records(in_dlq.body)] == [b"dead", b"dead2"]


async def test_pull_status_mapping_and_tag_filter(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    broker = cluster.broker_address
    await create_topic(client, cluster, "Tags", queues=2)
    for i in range(6):
        tag = "TagA" if i % 3 == 0 else "TagB"
        answer = await call(
            client, broker, send_request("Tags", f"m{i}".encode(), properties={"TAGS": tag})
        )
        assert answer.code == ResponseCode.SUCCESS

    only_a = await call(client, broker, pull_request("Tags", subscription="TagA"))
    assert only_a.body is not None
    assert [r.body for r in iter_records(only_a.body)] == [b"m0", b"m3"]
    assert only_a.ext_fields and only_a.ext_fields["nextBeginOffset"] == "6"
    none_match = await call(client, broker, pull_request("Tags", subscription="TagC"))
    assert none_match.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert none_match.ext_fields and none_match.ext_fields["nextBeginOffset"] == "6"
    limited = await call(client, broker, pull_request("Tags", 1, max_msgs=2))
    assert limited.body is not None
    assert [r.queue_offset for r in iter_records(limited.body)] == [1, 2]

    expectations = [
        (pull_request("Tags", 6), ResponseCode.PULL_NOT_FOUND, "6"),  # OFFSET_OVERFLOW_ONE
        (pull_request("Tags", 60), ResponseCode.PULL_OFFSET_MOVED, "6"),  # OVERFLOW_BADLY
        (pull_request("Tags", 0, queue_id=1), ResponseCode.PULL_NOT_FOUND, "0"),  # empty queue
        (pull_request("Tags", 5, queue_id=1), ResponseCode.PULL_OFFSET_MOVED, "0"),
    ]
    for request, code, next_offset in expectations:
        answer = await call(client, broker, request)
        assert answer.code == code, (request.ext_fields, answer.code, answer.remark)
        assert answer.ext_fields and answer.ext_fields["nextBeginOffset"] == next_offset


NOT_SUBSCRIBED = ResponseCode.SUBSCRIPTION_NOT_EXIST
SYSTEM_ERROR = ResponseCode.SYSTEM_ERROR


async def test_pull_checks_answer_their_codes(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    broker = cluster.broker_address
    await create_topic(client, cluster, "Pulled", queues=2)
    await create_topic(client, cluster, "WriteOnly", perm=2)
    cases = [
        (pull_request("NoSuchTopic"), ResponseCode.TOPIC_NOT_EXIST),
        (pull_request("WriteOnly"), ResponseCode.NO_PERMISSION),
        (pull_request("Pulled", queue_id=2), ResponseCode.SYSTEM_ERROR),
        (pull_request("Pulled", subscription=None, group="Silent"), NOT_SUBSCRIBED),
        (RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "Pulled"}), SYSTEM_ERROR),
    ]  # fmt: skip
    for request, code in cases:
        answer = await call(client, broker, request)
        assert answer.code == code, (request.ext_fields, answer.code, answer.remark)
        assert answer.remark


async def test_pull_of_unknown_group_without_auto_create(tmp_path: object) -> None:
    import boltmq

    async with (
        boltmq.embedded(auto_create_subscription_group=False) as cluster,
        RemotingClient() as client,
    ):
        await call(client, cluster.broker_address, send_request("T"))
        answer = await call(client, cluster.broker_address, pull_request("T", group="Unknown"))
        assert answer.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST


async def test_sends_keep_their_own_connections_born_host_and_bad_topics_stay_refused(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    # The send path caches valid topic names and each peer's address: a bad name is refused
    # every time, and each connection's records carry that connection's host and port.
    broker = cluster.broker_address
    for _ in range(2):
        refused = await call(client, broker, send_request("bad topic!"))
        assert refused.code == ResponseCode.SYSTEM_ERROR
    async with RemotingClient() as other:
        for sender in (client, other, client):
            answer = await call(sender, broker, send_request("BornHosts", b"x"))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
    pulled = await call(client, broker, pull_request("BornHosts"))
    assert pulled.code == ResponseCode.SUCCESS and pulled.body is not None
    hosts = [r.born_host for r in iter_records(pulled.body)]
    assert len(hosts) == 3 and hosts[0] == hosts[2] != hosts[1]
    assert {host for host, _ in hosts} == {"127.0.0.1"}
