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
from protocol import RemotingCommand, RequestCode
from protocol.acl import calculate_signature, request_content
from protocol.connection import Connection
from tests.support.waiting import wait_until

from .cpp_client import rocketmq
from .test_cpp_client import Inbox, text, unique

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

        # Keep the C++ client's signed requests as they arrive, then check them as usual.
        seen: list[RemotingCommand] = []

        def capture(connection: Connection, request: RemotingCommand) -> RemotingCommand | None:
            seen.append(request)
            return validator.guard(connection, request)

        cluster.broker.dispatcher.install_guard(capture)

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

        # The bytes it signs: every ext field but Signature, OnsChannel included, then the body.
        sends = [r for r in seen if r.code == RequestCode.SEND_MESSAGE and r.ext_fields]
        assert sends, "no SEND_MESSAGE from the C++ producer was seen"
        fields = sends[0].ext_fields
        assert fields is not None
        assert fields["AccessKey"] == "cppclient" and fields["OnsChannel"] == "ALIYUN"
        content = request_content(fields, sends[0].body)
        assert content.startswith(b"cppclient")  # "AccessKey" sorts first
        assert fields["Signature"] == calculate_signature(content, "cpp-secret-key")

        inbox = Inbox()
        consumer = rocketmq.PushConsumer(group)
        consumer.set_namesrv_addr(namesrv)
        consumer.set_session_credentials("cppclient", "cpp-secret-key", "ALIYUN")
        consumer.subscribe(topic, inbox, "*")
        await trio.to_thread.run_sync(consumer.start)
        try:
            await wait_until(lambda: len(inbox.snapshot()) >= 10, 60, "10 signed messages")
        finally:
            await trio.to_thread.run_sync(consumer.shutdown)
        assert sorted(m["body"] for m in inbox.snapshot()) == sorted(bodies)
        assert {text(m["topic"]) for m in inbox.snapshot()} == {topic}
