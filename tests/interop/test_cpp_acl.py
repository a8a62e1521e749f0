"""The official RocketMQ C++ client (session credentials) against a broker with ACL on.

Its signature (ext fields sorted by key, OnsChannel among them, then the body; HmacSHA1,
Base64) must match ours byte for byte, or every send and pull below is refused. Loopback only,
ephemeral ports, a deadline on every wait.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

import boltmq
from actors.acl import AccessValidator

from .cpp_client import rocketmq
from .test_cpp_client import Inbox, text, unique, wait_for

pytestmark = pytest.mark.timeout(180)

ACL = """
accounts:
  - accessKey: cppclient
    secretKey: cpp-secret-key
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - {topic}=PUB|SUB
    groupPerms:
      - {group}=SUB
"""


async def test_cpp_client_with_session_credentials(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic, group = unique("CppAclTopic"), unique("CppAclGroup")
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL.format(topic=topic, group=group))
    async with boltmq.embedded(
        tmp_path / "data", acl_enable=True, plain_acl_file=str(acl_file)
    ) as cluster:
        namesrv = cluster.registry_address
        validator = cluster.broker.acl
        assert isinstance(validator, AccessValidator)

        # Without credentials the C++ client sends an empty AccessKey: refused.
        anonymous = rocketmq.Producer(unique("PG"))
        anonymous.set_namesrv_addr(namesrv)
        await trio.to_thread.run_sync(anonymous.start)
        try:
            message = rocketmq.Message(topic)
            message.set_body(b"not allowed")
            # The C++ client reports its last retry's failure in its own words; the broker's
            # log says why.
            with pytest.raises(Exception, match=r"No route info|NO_PERMISSION"):
                await trio.to_thread.run_sync(anonymous.send_sync, message)
        finally:
            await trio.to_thread.run_sync(anonymous.shutdown)
        assert validator.statistics().refused >= 1
        assert "refused SEND_MESSAGE from 127.0.0.1:" in caplog.text
        assert "No accessKey is configured" in caplog.text

        producer = rocketmq.Producer(unique("PG"))
        producer.set_namesrv_addr(namesrv)
        producer.set_session_credentials("cppclient", "cpp-secret-key", "ALIYUN")
        await trio.to_thread.run_sync(producer.start)
        bodies = [f"signed {i}".encode() for i in range(10)]
        try:
            for body in bodies:
                message = rocketmq.Message(topic)
                message.set_keys(body.decode())
                message.set_body(body)
                result = await trio.to_thread.run_sync(producer.send_sync, message)
                assert result.status == rocketmq.SendStatus.OK
        finally:
            await trio.to_thread.run_sync(producer.shutdown)

        inbox = Inbox()
        consumer = rocketmq.PushConsumer(group)
        consumer.set_namesrv_addr(namesrv)
        consumer.set_session_credentials("cppclient", "cpp-secret-key", "ALIYUN")
        consumer.subscribe(topic, inbox, "*")
        await trio.to_thread.run_sync(consumer.start)
        try:
            await wait_for(lambda: len(inbox.snapshot()) >= 10, 60, "10 signed messages")
        finally:
            await trio.to_thread.run_sync(consumer.shutdown)
        assert sorted(m["body"] for m in inbox.snapshot()) == sorted(bodies)
        assert {text(m["topic"]) for m in inbox.snapshot()} == {topic}
