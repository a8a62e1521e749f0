"""RocketMQ 5's topic attributes on a live broker: UPDATE_AND_CREATE_TOPIC with an
``attributes`` change string, GET_TOPIC_CONFIG (351), topics.json across a restart, refusals
that change nothing, and the registry taking a registration that carries them.

Rules: loopback only, ephemeral ports, a real file store in ``tmp_path``, a deadline on every
wait.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import trio

from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.bodies import TopicConfig, TopicRouteData
from protocol.headers import (
    CreateTopicRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicConfigRequestHeader,
    encode_header,
)
from tests.actors.broker.delays import open_cluster
from tests.support.remoting import call


def create_request(topic: str, attributes: str | None, queues: int = 4) -> RemotingCommand:
    header = CreateTopicRequestHeader(
        topic=topic, default_topic="TBW102", read_queue_nums=queues, write_queue_nums=queues,
        perm=6, topic_filter_type="SINGLE_TAG", order=False, attributes=attributes,
    )  # fmt: skip
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, encode_header(header))


async def topic_config(client: RemotingClient, address: str, topic: str) -> RemotingCommand:
    header = encode_header(GetTopicConfigRequestHeader(topic=topic))
    return await call(
        client, address, RemotingCommand.request(RequestCode.GET_TOPIC_CONFIG, header)
    )


async def attributes_of(client: RemotingClient, address: str, topic: str) -> dict[str, str]:
    answer = await topic_config(client, address, topic)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return TopicConfig.from_json(answer.body or b"").attributes


async def test_attributes_set_changed_removed_and_kept_across_a_restart(tmp_path: Path) -> None:
    async with RemotingClient() as client:
        async with open_cluster(tmp_path) as cluster:
            address = cluster.broker_address
            answer = await call(client, address, create_request("AttrT", "+message.type=FIFO"))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            answer = await topic_config(client, address, "AttrT")
            document = orjson.loads(answer.body or b"")
            # RocketMQ 5's TopicConfigAndQueueMapping: the topic config's own fields.
            assert document["topicName"] == "AttrT"
            assert document["attributes"] == {"message.type": "FIFO"}
            assert document["readQueueNums"] == 4
            # A 4.x-style update (no attributes) keeps them, as a 5.x broker does.
            answer = await call(client, address, create_request("AttrT", None, queues=6))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            assert await attributes_of(client, address, "AttrT") == {"message.type": "FIFO"}
            # The registration carries them and the registry routes the topic as ever.
            route = await wait_route(client, cluster.registry_address, "AttrT")
            assert route.queue_datas[0].write_queue_nums == 6
            stored = orjson.loads((tmp_path / "store" / "config" / "topics.json").read_bytes())
            assert stored["topicConfigTable"]["AttrT"]["attributes"] == {"message.type": "FIFO"}
        async with open_cluster(tmp_path) as cluster:
            address = cluster.broker_address
            assert await attributes_of(client, address, "AttrT") == {"message.type": "FIFO"}
            answer = await call(client, address, create_request("AttrT", "+message.type=DELAY"))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            assert await attributes_of(client, address, "AttrT") == {"message.type": "DELAY"}
            answer = await call(client, address, create_request("AttrT", "-message.type"))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            assert await attributes_of(client, address, "AttrT") == {}


async def test_bad_attributes_are_refused_and_change_nothing(tmp_path: Path) -> None:
    async with RemotingClient() as client, open_cluster(tmp_path) as cluster:
        address = cluster.broker_address
        refused = {
            "+message.type=FIFOO": "message.type is one of",
            "+queue.type=BatchCQ": "unsupported topic attribute 'queue.type'",
            "message.type=FIFO": "malformed",
            "-message.type": "only +key=value",
            "+message.type=FIFO,+message.type=NORMAL": "named twice",
        }
        for attributes, remark in refused.items():
            answer = await call(client, address, create_request("AttrBad", attributes))
            assert answer.code == ResponseCode.SYSTEM_ERROR, attributes
            assert remark in (answer.remark or ""), (attributes, answer.remark)
        # Nothing was created by a refused request.
        answer = await topic_config(client, address, "AttrBad")
        assert answer.code == ResponseCode.TOPIC_NOT_EXIST
        assert "AttrBad" in (answer.remark or "")
        # On an existing topic, a refused change leaves queues and attributes as they were.
        answer = await call(client, address, create_request("AttrBad", "+message.type=NORMAL"))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        answer = await call(client, address, create_request("AttrBad", "-nokey", queues=9))
        assert answer.code == ResponseCode.SYSTEM_ERROR
        changes = "+message.type=TRANSACTION,-x"
        answer = await call(client, address, create_request("AttrBad", changes, queues=9))
        assert answer.code == ResponseCode.SYSTEM_ERROR
        answer = await topic_config(client, address, "AttrBad")
        config = TopicConfig.from_json(answer.body or b"")
        assert config.attributes == {"message.type": "NORMAL"}
        assert config.read_queue_nums == 4


async def wait_route(client: RemotingClient, namesrv: str, topic: str) -> TopicRouteData:
    """The topic's route once the broker's registration of its change arrived."""
    header = encode_header(GetRouteInfoRequestHeader(topic=topic))
    with trio.fail_after(10):
        while True:
            request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, header)
            answer = await call(client, namesrv, request)
            if answer.code == ResponseCode.SUCCESS:
                route = TopicRouteData.from_json(answer.body or b"")
                if route.queue_datas[0].write_queue_nums == 6:
                    return route
            await trio.sleep(0.05)
