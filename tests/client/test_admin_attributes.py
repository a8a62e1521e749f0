"""The admin client and RocketMQ 5's topic attributes: set with create_topic, read back with
get_topic_config (the call a gRPC front makes to learn a topic's message.type), refused before
any broker changes when malformed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from client import Admin, MQClientError
from protocol.bodies import TopicAttributeError
from protocol.codes import ResponseCode

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_create_with_attributes_and_read_them_back(
    cluster: Any, unique: Callable[[str], str], anyio_backend: str
) -> None:
    topic = unique("AttrAdmin")
    async with Admin(namesrv_addr=cluster.namesrv) as admin:
        await admin.create_topic(topic, broker_addr=cluster.broker, queue_nums=2,
                                 attributes="+message.type=FIFO")  # fmt: skip
        config = await admin.get_topic_config(cluster.broker, topic)
        assert config.attributes == {"message.type": "FIFO"}
        assert config.message_type == "FIFO"
        assert (config.read_queue_nums, config.write_queue_nums) == (2, 2)
        await admin.create_topic(topic, broker_addr=cluster.broker, queue_nums=2,
                                 attributes="-message.type")  # fmt: skip
        config = await admin.get_topic_config(cluster.broker, topic)
        assert config.attributes == {} and config.message_type == "NORMAL"
        # Checked on the client: nothing is sent, so the topic keeps what it has.
        with pytest.raises(TopicAttributeError, match=r"message\.type is one of"):
            await admin.create_topic(topic, broker_addr=cluster.broker, queue_nums=5,
                                     attributes="+message.type=fifo")  # fmt: skip
        assert (await admin.get_topic_config(cluster.broker, topic)).read_queue_nums == 2
        # The broker checks too: removing a key the topic does not have.
        with pytest.raises(MQClientError, match="not set") as refused:
            await admin.create_topic(topic, broker_addr=cluster.broker, attributes="-message.type")
        assert refused.value.code == ResponseCode.SYSTEM_ERROR
        with pytest.raises(MQClientError) as missing:
            await admin.get_topic_config(cluster.broker, unique("NoSuchTopic"))
        assert missing.value.code == ResponseCode.TOPIC_NOT_EXIST
