"""RocketMQ's Java client with its ACL hook (AclClientRPCHook) against a broker with ACL on:
signed, it sends and pulls; unsigned or with a wrong secret key, both are refused with
NO_PERMISSION.

The client is tests/interop/java/AclClient.java, compiled and run by tests/interop/java_client.py
from the release named by BOLTMQ_ROCKETMQ_HOME (skipped, saying so, without it). Loopback only,
ephemeral ports, a deadline on every wait.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import boltmq
from actors.acl import AccessValidator
from protocol import ResponseCode

from .java_client import java_client, results, run_java

__all__ = ["java_client"]

pytestmark = pytest.mark.timeout(300)

ACL = """
accounts:
  - accessKey: javaclient
    secretKey: java-secret-key
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - {topic}=PUB|SUB
    groupPerms:
      - {group}=SUB
"""


async def test_java_client_with_acl_hook(
    tmp_path: Path, java_client: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"JavaAclTopic_{suffix}", f"JavaAclGroup_{suffix}"
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL.format(topic=topic, group=group))
    async with boltmq.embedded(
        tmp_path / "data", acl_enable=True, plain_acl_file=str(acl_file)
    ) as cluster:
        namesrv = cluster.registry_address
        validator = cluster.broker.acl
        assert isinstance(validator, AccessValidator)

        # Signed: ten messages go in and come back out with their bodies.
        count = 10
        lines = await run_java(
            java_client, "produce-consume", namesrv, topic, group, str(count),
            "javaclient", "java-secret-key",
        )  # fmt: skip
        sent = results(lines, "SENT")
        assert [status for status, _ in sent] == ["SEND_OK"] * count, lines
        received = results(lines, "RECEIVED")
        bodies = sorted(fields[1].split(" ", 1)[1] for fields in received)
        assert bodies == sorted(f"java message {i}" for i in range(count)), lines
        assert validator.statistics().refused == 0

        # Unsigned: the producer's send and the consumer's pull are refused.
        lines = await run_java(java_client, "refused", namesrv, topic, group)
        assert_refused(lines, "No accessKey is configured")
        assert "No accessKey is configured" in caplog.text
        refused_unsigned = validator.statistics().refused
        assert refused_unsigned >= 2

        # A wrong secret: the signature does not check.
        lines = await run_java(
            java_client, "refused", namesrv, topic, group, "javaclient", "wrong-secret-key"
        )
        assert_refused(lines, "Check signature failed for accessKey=javaclient")
        assert validator.statistics().refused >= refused_unsigned + 2
        assert "Check signature failed for accessKey=javaclient" in caplog.text


def assert_refused(lines: list[str], reason: str) -> None:
    """Both the send and the pull were answered NO_PERMISSION with ``reason`` in the remark."""
    for kind in ("SEND_REFUSED", "PULL_REFUSED"):
        found = results(lines, kind)
        assert len(found) == 1, f"no {kind} line in the Java client's output:\n" + "\n".join(lines)
        code, remark = found[0]
        assert int(code) == ResponseCode.NO_PERMISSION, remark
        assert reason in remark, remark
