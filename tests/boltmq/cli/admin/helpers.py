"""Helpers of the admin tests: run the command line, make known traffic, commit offsets.

Rules: loopback only, ephemeral ports, every wait has a deadline. The command line runs its own
trio loop, so tests are plain functions and set-up steps run in `trio.run` of their own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
import trio

from boltmq import cli
from client import Admin, Message, Producer
from protocol.bodies import MessageQueue
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import UpdateConsumerOffsetRequestHeader, encode_header
from tests.support.waiting import poll_until_sync

__all__ = [
    "admin_json",
    "commit_offsets",
    "make_topic",
    "run_admin",
    "run_async",
    "send_per_queue",
    "wait_for",
]


def run_admin(
    capsys: pytest.CaptureFixture[str], namesrv: str | None, *argv: str
) -> tuple[int, str, str]:
    """``boltmq admin VERB ...`` in-process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    args = ["admin", *argv]
    if namesrv is not None:
        args += ["-n", namesrv]
    code = cli.main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def admin_json(capsys: pytest.CaptureFixture[str], namesrv: str, *argv: str) -> Any:
    """The ``--json`` document of a verb that must succeed."""
    code, out, err = run_admin(capsys, namesrv, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def wait_for(probe: Callable[[], Any], check: Callable[[Any], bool], timeout: float = 30.0) -> Any:
    """Call ``probe`` until ``check`` holds for its value; fail with the last one after
    ``timeout`` s. For figures the broker samples on its own clock (stats every 10 s)."""
    return poll_until_sync(probe, check, timeout, "the expected value", interval=0.2)


def _run(function: Callable[[], Awaitable[Any]]) -> Any:
    async def bounded() -> Any:
        with trio.fail_after(60):
            return await function()

    return trio.run(bounded)


def make_topic(namesrv: str, topic: str, queues: int) -> str:
    """Create ``topic`` with ``queues`` queues, wait until routed; its broker's name."""

    async def create() -> str:
        async with Admin(namesrv_addr=namesrv) as admin:
            await admin.create_topic(topic, queue_nums=queues)
            while True:
                try:
                    route = await admin.route(topic)
                    return route.broker_datas[0].broker_name
                except Exception:
                    await trio.sleep(0.05)

    result: str = _run(create)
    return result


def send_per_queue(
    namesrv: str,
    topic: str,
    broker_name: str,
    counts: Sequence[int],
    first: int = 0,
    group: str = "admin-test-p",
) -> list[int]:
    """Send ``counts[i]`` messages to queue i, bodies ``b"i-offset"`` from offset ``first``;
    the moments each send was answered (ms), in send order."""

    async def send() -> list[int]:
        stamps = []
        async with Producer(group, namesrv_addr=namesrv) as producer:
            for queue_id, count in enumerate(counts):
                queue = MessageQueue(topic=topic, broker_name=broker_name, queue_id=queue_id)
                for offset in range(first, first + count):
                    body = f"{queue_id}-{offset}".encode()
                    message = Message(topic, body, keys=f"k{queue_id}-{offset}")
                    result = await producer.send(message, queue=queue)
                    assert result.queue_offset == offset
                    stamps.append(int(time.time() * 1000))
        return stamps

    result: list[int] = _run(send)
    return result


def commit_offsets(
    namesrv: str, broker_addr: str, group: str, topic: str, offsets: Sequence[int]
) -> None:
    """Commit ``offsets[i]`` for queue i of ``group`` (UPDATE_CONSUMER_OFFSET, as a consumer)."""

    async def commit() -> None:
        async with Admin(namesrv_addr=namesrv) as admin:
            for queue_id, offset in enumerate(offsets):
                header = UpdateConsumerOffsetRequestHeader(
                    consumer_group=group, topic=topic, queue_id=queue_id, commit_offset=offset
                )
                request = RemotingCommand.request(
                    RequestCode.UPDATE_CONSUMER_OFFSET, encode_header(header)
                )
                response = await admin.instance.invoke_broker(broker_addr, request)
                assert response.code == ResponseCode.SUCCESS, response.remark

    _run(commit)


def run_async(function: Callable[[Admin], Awaitable[Any]], namesrv: str) -> Any:
    """``function(admin)`` with an open Admin, in a trio run of its own."""

    async def call() -> Any:
        async with Admin(namesrv_addr=namesrv) as admin:
            return await function(admin)

    return _run(call)
