"""SQL92 subscriptions over the wire: CHECK_CLIENT_CONFIG, pulls filtered on the messages'
properties (by the pull's own subscription and by the heartbeat's), held pulls that wake
only for a matching message, and RocketMQ's refusals when enablePropertyFilter is off.

Rules: loopback only, ephemeral ports, a real store (file and memory), a deadline on every
wait.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

import boltmq
from boltmq import EmbeddedCluster
from protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from protocol.bodies import CheckClientRequestBody, SubscriptionData
from protocol.headers import PullMessageResponseHeader, decode_header
from protocol.message import iter_records
from tests.actors.broker.helpers import (
    SMALL_FILES,
    heartbeat_request,
    pull_request,
    send_request,
)

MESSAGES = 20
DISABLED = "The broker does not support consumer to filter message by SQL92"


def properties_of(i: int) -> dict[str, str]:
    """Message i's properties: a = i, b cycles x y z w, c only on even i."""
    properties = {"a": str(i), "b": "xyzw"[i % 4]}
    if i % 2 == 0:
        properties["c"] = "set"
    return properties


CASES: list[tuple[str, Callable[[int], bool]]] = [
    ("a > 5", lambda i: i > 5),
    ("a BETWEEN 3 AND 4", lambda i: 3 <= i <= 4),
    ("b IN ('x','y')", lambda i: i % 4 in (0, 1)),
    ("c IS NULL", lambda i: i % 2 == 1),
    ("a < 10 AND (b = 'z' OR c IS NOT NULL)", lambda i: i < 10 and (i % 4 == 2 or i % 2 == 0)),
]


async def fill(client: RemotingClient, broker: str, topic: str) -> None:
    for i in range(MESSAGES):
        answer = await client.invoke(
            broker, send_request(topic, f"m{i}".encode(), properties=properties_of(i))
        )
        assert answer.code == ResponseCode.SUCCESS, answer.remark


def bodies(answer: RemotingCommand) -> list[bytes]:
    assert answer.body is not None
    return [record.body for record in iter_records(answer.body)]


def check_request(expression: str, expression_type: str = "SQL92") -> RemotingCommand:
    body = CheckClientRequestBody(
        client_id="127.0.0.1@1",
        group="CG",
        subscription_data=SubscriptionData(
            topic="T", sub_string=expression, expression_type=expression_type, sub_version=1
        ),
    )
    return RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, None, body.to_json())


async def test_check_client_config(sql_cluster: EmbeddedCluster, client: RemotingClient) -> None:
    broker = sql_cluster.broker_address
    with trio.fail_after(10):
        ok = await client.invoke(broker, check_request("a > 5 AND b IN ('x')"))
        assert (ok.code, ok.remark) == (ResponseCode.SUCCESS, None)
        tag = await client.invoke(broker, check_request("TagA || TagB", "TAG"))
        assert tag.code == ResponseCode.SUCCESS
        bad = await client.invoke(broker, check_request("a > "))
        assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert bad.remark is not None
        assert bad.remark.startswith(
            'org.apache.rocketmq.filter.parser.ParseException: Encountered "<EOF>" at line 1,'
        )
        refused = await client.invoke(broker, check_request("a BETWEEN 5 AND 1"))
        assert refused.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert refused.remark == (
            "java.lang.RuntimeException: Illegal values of between, left value(5) must less "
            "than or equal to right value(1)"
        )
        no_body = await client.invoke(
            broker, RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, None, None)
        )
        assert no_body.code == ResponseCode.SUCCESS


async def test_check_client_config_with_the_filter_off(
    client: RemotingClient, tmp_path: Path
) -> None:
    async with boltmq.embedded(tmp_path, **SMALL_FILES) as cluster:
        broker = cluster.broker_address
        with trio.fail_after(10):
            answer = await client.invoke(broker, check_request("a > 5"))
            assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, DISABLED)
            tag = await client.invoke(broker, check_request("*", "TAG"))
            assert tag.code == ResponseCode.SUCCESS


@pytest.mark.parametrize(("expression", "matches"), CASES)
async def test_pull_by_the_pull_subscription_returns_exactly_the_matches(
    sql_cluster: EmbeddedCluster,
    client: RemotingClient,
    expression: str,
    matches: Callable[[int], bool],
) -> None:
    broker = sql_cluster.broker_address
    with trio.fail_after(20):
        await fill(client, broker, "Sql")
        answer = await client.invoke(
            broker, pull_request("Sql", 0, subscription=expression, expression_type="SQL92")
        )
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert bodies(answer) == [f"m{i}".encode() for i in range(MESSAGES) if matches(i)]
    header = decode_header(PullMessageResponseHeader, answer.ext_fields)
    # The next pull starts past every message scanned, the unmatched ones included.
    assert header.next_begin_offset == MESSAGES


async def test_pull_by_the_heartbeat_subscription(
    sql_cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    broker = sql_cluster.broker_address
    with trio.fail_after(20):
        await fill(client, broker, "SqlBeat")
        beat = await client.invoke(
            broker,
            heartbeat_request("c1", "CG", "SqlBeat", "a BETWEEN 3 AND 4", expression_type="SQL92"),
        )
        assert beat.code == ResponseCode.SUCCESS
        answer = await client.invoke(broker, pull_request("SqlBeat", 0, subscription=None))
        assert bodies(answer) == [b"m3", b"m4"]
        # A new subVersion with a new expression is compiled afresh.
        beat = await client.invoke(
            broker,
            heartbeat_request(
                "c1", "CG", "SqlBeat", "b = 'w'", expression_type="SQL92", sub_version=2
            ),
        )
        answer = await client.invoke(
            broker, pull_request("SqlBeat", 0, subscription=None, sub_version=2)
        )
        assert bodies(answer) == [b"m3", b"m7", b"m11", b"m15", b"m19"]
        # A bad expression by heartbeat: RocketMQ's filter data is missing.
        await client.invoke(
            broker,
            heartbeat_request(
                "c1", "CG", "SqlBeat", "b = ", expression_type="SQL92", sub_version=3
            ),
        )
        answer = await client.invoke(
            broker, pull_request("SqlBeat", 0, subscription=None, sub_version=3)
        )
        assert answer.code == ResponseCode.FILTER_DATA_NOT_EXIST
        assert answer.remark == (
            "The broker's consumer filter data is not exist!Your expression may be wrong!"
        )


async def test_a_bad_pull_expression_is_refused(
    sql_cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    broker = sql_cluster.broker_address
    with trio.fail_after(10):
        await fill(client, broker, "SqlBad")
        for expression in ("a >", ""):
            answer = await client.invoke(
                broker, pull_request("SqlBad", 0, subscription=expression, expression_type="SQL92")
            )
            assert answer.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
            assert answer.remark == "parse the consumer's subscription failed"


async def test_with_the_filter_off_sql92_pulls_are_refused(
    cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    broker = cluster.broker_address
    with trio.fail_after(10):
        await fill(client, broker, "SqlOff")
        answer = await client.invoke(
            broker, pull_request("SqlOff", 0, subscription="a > 5", expression_type="SQL92")
        )
        assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, DISABLED)
        await client.invoke(
            broker, heartbeat_request("c1", "CG", "SqlOff", "a > 5", expression_type="SQL92")
        )
        answer = await client.invoke(broker, pull_request("SqlOff", 0, subscription=None))
        assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, DISABLED)
        # Tags still work.
        answer = await client.invoke(broker, pull_request("SqlOff", 0, subscription="*"))
        assert len(bodies(answer)) == MESSAGES


async def test_a_held_pull_wakes_only_for_a_matching_message(
    sql_cluster: EmbeddedCluster, client: RemotingClient
) -> None:
    broker = sql_cluster.broker_address
    answers: list[RemotingCommand] = []

    async def hold() -> None:
        # Nothing after offset 1 yet: with the suspend bit the pull is held.
        request = pull_request(
            "SqlHeld", 1, subscription="a > 5", expression_type="SQL92", suspend_ms=15_000
        )
        answers.append(await client.invoke(broker, request, 30))

    with trio.fail_after(20):
        # The queue must exist for the pull to be held rather than refused.
        created = await client.invoke(
            broker, send_request("SqlHeld", b"first", properties={"a": "0"})
        )
        assert created.code == ResponseCode.SUCCESS
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold)
            while sql_cluster.broker.pull_hold.held == 0:
                await trio.sleep(0.001)
            for value in ("1", "2", "x"):
                sent = await client.invoke(
                    broker, send_request("SqlHeld", f"no {value}".encode(), properties={"a": value})
                )
                assert sent.code == ResponseCode.SUCCESS
            # A plain pull sees those three; the held one must not have been answered by them.
            plain = await client.invoke(broker, pull_request("SqlHeld", 1, subscription="*"))
            assert len(bodies(plain)) == 3
            assert sql_cluster.broker.pull_hold.held == 1
            sent = await client.invoke(
                broker, send_request("SqlHeld", b"yes", properties={"a": "9"})
            )
            assert sent.code == ResponseCode.SUCCESS
    (answer,) = answers
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert bodies(answer) == [b"yes"]
    assert decode_header(PullMessageResponseHeader, answer.ext_fields).next_begin_offset == 5
    assert sql_cluster.broker.pull_hold.statistics().woken == 1


async def test_an_unsupported_code_is_logged_once_with_the_asker(
    cluster: EmbeddedCluster, client: RemotingClient, caplog: pytest.LogCaptureFixture
) -> None:
    broker = cluster.broker_address
    with caplog.at_level(logging.WARNING, logger="boltmq.remoting"), trio.fail_after(10):
        for _ in range(3):
            answer = await client.invoke(broker, RemotingCommand.request(9876, None, None))
            assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    logged = [r.getMessage() for r in caplog.records if "request code 9876" in r.getMessage()]
    assert len(logged) == 1
    assert "127.0.0.1:" in logged[0] and "language JAVA" in logged[0]
