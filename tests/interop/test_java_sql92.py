"""RocketMQ's Java push consumer with MessageSelector.bySql against BoltMQ: with
enablePropertyFilter it starts (CHECK_CLIENT_CONFIG answered) and receives exactly the
matching messages; a bad expression, or a broker without the filter, fails its start with
RocketMQ's code.

The client is tests/interop/java/AclClient.java (mode sql92), compiled and run by
tests/interop/java_client.py from the release named by BOLTMQ_ROCKETMQ_HOME (skipped, saying
so, without it). Loopback only, ephemeral ports, a deadline on every wait.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import boltmq
from protocol import ResponseCode

from .java_client import java_client, results, run_java

__all__ = ["java_client"]

pytestmark = pytest.mark.timeout(300)
COUNT = 10


async def test_java_sql92_push_consumer(tmp_path: Path, java_client: list[str]) -> None:
    suffix = uuid.uuid4().hex[:8]
    async with boltmq.embedded(tmp_path / "on", enable_property_filter=True) as cluster:
        lines = await run_java(
            java_client, "sql92", cluster.registry_address, f"JavaSql_{suffix}",
            f"JavaSqlGroup_{suffix}", str(COUNT), "4", "a > 5",
        )  # fmt: skip
        assert len(results(lines, "SENT")) == COUNT
        received = sorted(
            body for _, body in (r[1].split(" ", 1) for r in results(lines, "RECEIVED"))
        )
        assert received == sorted(f"java message {i}" for i in range(6, COUNT))

        lines = await run_java(
            java_client, "sql92", cluster.registry_address, f"JavaSqlBad_{suffix}",
            f"JavaSqlBadGroup_{suffix}", "1", "1", "a > ",
        )  # fmt: skip
        (refused,) = results(lines, "START_REFUSED")
        assert refused[0] == str(int(ResponseCode.SUBSCRIPTION_PARSE_FAILED)), refused

    async with boltmq.embedded(tmp_path / "off") as cluster:
        lines = await run_java(
            java_client, "sql92", cluster.registry_address, f"JavaSqlOff_{suffix}",
            f"JavaSqlOffGroup_{suffix}", "1", "1", "a > 5",
        )  # fmt: skip
        (refused,) = results(lines, "START_REFUSED")
        assert refused[0] == str(int(ResponseCode.SYSTEM_ERROR)), refused
        assert "does not support consumer to filter message by SQL92" in refused[1]
